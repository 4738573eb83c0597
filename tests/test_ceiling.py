"""``mqlab ceiling`` on a real RabbitMQ node: each plugin beside its library.

Two short runs against the session's broker (starting a private node per run
would double each run's time and prove nothing more: the ceiling only needs a
RabbitMQ to measure against): one where Java is on
PATH (every cast step shows its reference loop's rate, the plugin's share of
it, and RabbitMQ PerfTest's rate), one with Java hidden from PATH (one line
says PerfTest did not run; the library loops still do) and with a plugin that
ships no reference loop (one line names it). And one brokerless run (zmq): mqlab's own
share of each message's CPU, beside the bare library loop's.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BrokerHandle
from tests.helpers import mqlab, results, write_profile

PROFILE = """
[run]
duration = "2s"
warmup = "1s"
drain = "10s"
{drivers}
[defaults]
serializer = "msgpack"
envelope = false
message_size = 200
[[scenario]]
pattern = "cast"
concurrency = 8
"""

AMQP_DRIVERS = """
[drivers.pika]
plugin = "pika"
retry = 0
[drivers.aiormq]
plugin = "aiormq"
no_ack = true
confirm = false
"""


def _ceiling(tmp_path: Path, broker: BrokerHandle, drivers: str) -> tuple[Any, dict[str, Any]]:
    path = write_profile(tmp_path / "p.toml", PROFILE.format(drivers=drivers))
    out = tmp_path / "r.json"
    proc = mqlab("ceiling", str(path), "--broker", broker.url, "-o", str(out), timeout=400)
    assert proc.returncode == 0, proc.stderr
    # the results file keeps it: `mqlab show` prints the same table again
    shown = mqlab("show", str(out))
    assert shown.returncode == 0 and "ceilings (cast, same broker" in shown.stdout, shown.stdout
    return proc, results(out)


def _row(stdout: str, driver: str) -> str:
    (row,) = [ln for ln in stdout.splitlines() if f" {driver} " in ln and "(auto-ack)" in ln]
    return row


@pytest.mark.broker
def test_every_cast_step_shows_its_library_ceiling_and_perftest(
    tmp_path: Path, broker: BrokerHandle
) -> None:
    proc, doc = _ceiling(tmp_path, broker, AMQP_DRIVERS)
    for step in doc["steps"]:
        ceiling = step["ceiling"]
        assert ceiling["size"] == 201, ceiling  # the plugin's encoded message, not the padding
        assert ceiling["mode"] == "auto-ack", ceiling  # retry = 0 / no_ack = true
        assert ceiling["rate"] > 0 and ceiling["error"] is None, ceiling
        assert ceiling["percent"] > 0, ceiling
        perftest = ceiling["perftest"]
        assert perftest["rate"] > 0 and perftest["percent"] > 0, perftest
        assert "-x 1 -y 1 -s 201 -z 3 -a" in perftest["command"], perftest
        assert "guest:***@" in perftest["command"]  # the password never shown
        # CPU per message of the step's client and server, of the loop's two processes
        cpu = (*ceiling["cpu_us"].values(), *ceiling["loop_cpu_us"].values())
        assert len(cpu) == 4 and all(us > 0 for us in cpu), ceiling
        assert isinstance(ceiling["mqlab_share"], float), ceiling
    for driver, library in (("pika", "pika "), ("aiormq", "aiormq ")):
        row = _row(proc.stdout, driver)
        # % of loop, mqlab's share, % of PerfTest
        assert library in row and row.count("%") == 3, row
    assert "broker ceiling: PerfTest 2.22.1 (Java " in proc.stdout
    # pika is mandatory by default: its casts waited for confirms, the loop's did not
    assert (
        "step 1 (pika): each cast waited for a publisher confirm (mandatory = true); "
        "the loop and PerfTest publish without" in proc.stdout
    ), proc.stdout
    assert "step 2 (aiormq): each cast waited" not in proc.stdout  # confirm = false


def _without_java(tmp_path: Path) -> str:
    """PATH as it is, but every directory holding `java` shadowed by one without it."""
    dirs = []
    for i, d in enumerate(os.environ["PATH"].split(os.pathsep)):
        if not (Path(d) / "java").exists():
            dirs.append(d)
            continue
        shadow = tmp_path / f"bin{i}"
        shadow.mkdir()
        for entry in Path(d).iterdir():
            if entry.name != "java":
                (shadow / entry.name).symlink_to(entry)
        dirs.append(str(shadow))
    return os.pathsep.join(dirs)


@pytest.mark.broker
def test_without_java_one_line_says_so_and_the_library_loop_still_runs(
    tmp_path: Path, broker: BrokerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", _without_java(tmp_path))
    assert shutil.which("java") is None
    drivers = AMQP_DRIVERS.split("[drivers.aiormq]")[0] + '[drivers.lo]\nplugin = "loopback"\n'
    proc, doc = _ceiling(tmp_path, broker, drivers)
    pika, lo = doc["steps"]
    assert pika["ceiling"]["rate"] > 0 and pika["ceiling"]["percent"] > 0
    assert pika["ceiling"]["perftest"]["rate"] is None
    assert "no Java on PATH" in pika["ceiling"]["perftest"]["missing"]
    assert proc.stdout.count("no Java on PATH: PerfTest") == 1, proc.stdout  # one line
    assert lo["ceiling"]["rate"] is None and lo["ceiling"]["perftest"] is None
    assert "plugin 'loopback' ships no reference loop" in proc.stdout


def test_mqlab_s_own_share_of_each_message_s_cpu_is_in_the_table(tmp_path: Path) -> None:
    # zmq needs no broker: its step's client and server beside pyzmq's bare PUSH/PULL loop
    path = write_profile(
        tmp_path / "p.toml", PROFILE.format(drivers='[drivers.zmq]\nplugin = "zmq"\n')
    )
    out = tmp_path / "r.json"
    proc = mqlab("ceiling", str(path), "-o", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    (step,) = results(out)["steps"]
    ceiling = step["ceiling"]
    mine, bare = ceiling["cpu_us"], ceiling["loop_cpu_us"]
    assert set(mine) == {"client", "server"} and set(bare) == {"publisher", "consumer"}
    assert all(us > 0 for us in (*mine.values(), *bare.values())), ceiling
    # mqlab numbers, stamps, encodes and records every message the library moves: the
    # step's client and server spend more per message than the loop's, and the table says
    # how much of it is mqlab's
    assert 0 < ceiling["mqlab_share"] < 100, ceiling
    (row,) = [ln for ln in proc.stdout.splitlines() if " zmq " in ln and "pyzmq" in ln]
    assert f"{mine['client']:.1f} + {mine['server']:.1f}" in row, row
    assert f"{ceiling['mqlab_share']:.0f} %" in row, row
