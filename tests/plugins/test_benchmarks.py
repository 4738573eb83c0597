"""The per-side benchmarks a harness change is measured with run to the end and count messages.

Not timed (the machine is shared): each is run with short windows and must report, for
every process it measures, a CPU figure over messages it actually sent or received.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

from mqlab.servers.handle import ServerHandle

ROOT = Path(__file__).resolve().parents[2]
#: "  server       4.84 µs CPU/msg  (  200,221 msg/s, 4.85 CPU s, 1,001,106 msgs)"
LINE = re.compile(r"^\s+(\w+)\s+([\d.]+) µs CPU/msg\s+\(.*?([\d,]+) msgs\)$", re.M)


def _run(script: str, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--seconds", "1", "--warmup", "0.5",
         *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def _measured(stdout: str) -> list[tuple[str, float, int]]:
    return [(m[1], float(m[2]), int(m[3].replace(",", ""))) for m in LINE.finditer(stdout)]


def test_nats_cast_measures_the_plugin_the_bare_loop_and_the_loop_with_the_receipt(
    nats_server: ServerHandle,
) -> None:
    stdout = _run("nats_cast.py", "--url", nats_server.urls[0])
    sides = _measured(stdout)
    # mqlab's client and server, then each loop's publisher and consumer
    assert [s for s, _, _ in sides] == ["client", "server", *["publisher", "consumer"] * 2]
    assert all(n > 0 and cpu > 0 for _, cpu, n in sides), stdout
    assert "with mqlab's receipt" in stdout


def test_zmq_cast_measures_the_plugin_and_the_bare_loop() -> None:
    stdout = _run("zmq_cast.py")
    sides = _measured(stdout)
    assert [s for s, _, _ in sides] == ["client", "server", "publisher", "consumer"]
    assert all(n > 0 and cpu > 0 for _, cpu, n in sides), stdout


def test_a_benchmark_whose_server_is_down_ends_with_one_line_not_a_hang() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "nats_cast.py"), "--seconds", "1",
         "--url", f"nats://127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("benchmark: the server process ended"), out.stderr[-2000:]
