"""The live monitor's own CPU: its Live redraws at 4 Hz for a while in each view.

    .venv/bin/python scripts/monitor_cost.py [seconds per view]

A snapshot as client-libraries.toml has it near its end (30 steps, 29 finished, each
with 30 s of per-second figures, 6 workers, 3 error kinds) is drawn into a 140 x 45
terminal (its bytes go to /dev/null); the process's CPU time over the wall time is
the monitor's share of a core. Prints one line per view.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace

from rich.console import Console

from mqlab.live.monitor import REFRESH_HZ, Monitor
from mqlab.live.snapshot import ErrorRow, RunSnapshot, StepRow, StepSeries, WorkerRow


def snapshot() -> RunSnapshot:
    drivers = [f"{lib}-p{p}" for lib in ("aiormq", "kombu", "pika") for p in (1, 4, 16, 64)]
    rows = tuple(
        StepRow(
            index=i,
            driver=drivers[i % len(drivers)],
            pattern="cast" if i < 15 else "notify",
            load="c=25",
            phase="done",
            sent=2_541_234 + i,
            received=2_541_234 + i,
            lost=0,
            rate_mean=84_000.0 + i,
            p50_ms=1.23,
            p99_ms=12.3,
            cpu_clients=98.0,
            cpu_servers=143.0,
            cpu_broker=187.0,
        )
        for i in range(29)
    )
    series = tuple(
        StepSeries(
            index=i,
            label=f"{i + 1} {r.driver} {r.pattern} c=25",
            running=i == 29,
            rate=tuple(84_000 + (j * 37 % 500) for j in range(30)),
            p99_ms=tuple(12.0 + (j % 7) for j in range(30)),
            events=((5.0, "kill node2"),) if i == 29 else (),
        )
        for i, r in enumerate((*rows, rows[0]))
    )
    return RunSnapshot(
        profile="client-libraries", steps_total=30, step_number=30, elapsed=0.0,
        eta=2400.0, broker="amqp://guest:***@127.0.0.1:5672/",
        current=StepRow(index=29, driver="pika-p64", pattern="notify", load="c=25",
                        phase="measuring", sent=1_000_000, received=999_000,
                        rate_now=84_000.0, p50_ms=1.2, p99_ms=12.0),
        finished=rows, timeline=series,
        workers=(*(WorkerRow(f"c{i}", "client", "running", 45.0, 60.5) for i in range(4)),
                 WorkerRow("s0", "server", "running", 80.0, 70.1),
           WorkerRow("broker", "broker", "running", 187.0, 180.0)),
        errors=(ErrorRow("CallTimeout", 12, "no reply within 30s", 30),
                ErrorRow("ConnectionLost", 2, "connection reset by peer", 12),
                ErrorRow("Undeliverable", 1, "NO_ROUTE: exchange 'x' has no queue", 3)),
    )  # fmt: skip


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    with open(os.devnull, "w") as sink:
        console = Console(file=sink, force_terminal=True, width=140, height=45)
        mon = Monitor(console, on_next=lambda: None, on_quit=lambda: None)
        snap = snapshot()
        current = snap.current
        assert current is not None
        running = snap.timeline[-1]
        mon.live.start()
        try:
            for view in ("1", "2", "3", "4"):
                mon.key(view)
                cpu0, wall0 = time.process_time(), time.monotonic()
                while (now := time.monotonic()) - wall0 < seconds:
                    # the runner's snapshots, 4 a second, each with a new clock and rate
                    second = int(now - wall0)  # the running step gains a second each second
                    big = replace(running, rate=running.rate + (84_000,) * second)
                    mon.update(
                        replace(
                            snap,
                            elapsed=now - wall0,
                            current=replace(current, rate_now=84_000.0 + second),
                            timeline=(*snap.timeline[:-1], big),
                        )
                    )
                    time.sleep(1 / REFRESH_HZ)
                cpu = time.process_time() - cpu0
                wall = time.monotonic() - wall0
                # Live redirects sys.stdout into its console: the figures go around it
                print(f"{mon.screen.view:>8}: {100 * cpu / wall:.2f} % of a core "
                      f"({REFRESH_HZ} Hz, {wall:.0f} s)", file=sys.__stdout__)  # fmt: skip
        finally:
            mon.live.stop()


if __name__ == "__main__":
    main()
