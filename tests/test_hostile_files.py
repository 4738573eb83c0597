"""Input files of the wrong kind (issue 44, class 6): a results file nested deeper than any
run writes, a FIFO that nobody writes to, two throughputs whose ratio overflows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import results_fixtures as fx
from tests.helpers import ROOT, mqlab
from tests.hostile import refused


@pytest.mark.parametrize("depth", [500, 990])
def test_a_results_file_nested_deeply_is_one_line_for_every_reader(
    tmp_path: Path, depth: int
) -> None:
    doc = fx.schema2_run()
    doc["environment"]["note"] = "DEEP"
    src = tmp_path / "deep.json"  # deep enough to parse, and to crash a recursive walk
    src.write_text(json.dumps(doc).replace('"DEEP"', "[" * depth + "]" * depth))
    for args in (
        ["show", str(src)],
        ["show", "--markdown", str(src)],
        ["report", str(src)],
        ["export", str(src), "--csv", str(tmp_path / "csv")],
        ["compare", str(src), str(src)],
    ):
        line = refused(mqlab(*args), str(src), "nested too deeply (more than 64 levels)")
        assert "RecursionError" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep.json"], "something was written"


def test_a_fifo_nobody_writes_to_is_refused_by_every_command_not_waited_on(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    commands = {
        "show": ["show", str(fifo)],
        "report": ["report", str(fifo), "-o", str(tmp_path / "r.html")],
        "export": ["export", str(fifo), "--csv", str(tmp_path / "csv")],
        "validate": ["validate", str(fifo)],
        "run": ["run", str(fifo), "-o", str(tmp_path / "r.json")],
    }
    started = time.monotonic()
    procs = {}
    for name, args in commands.items():
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "mqlab.console.cli", *args], cwd=ROOT, text=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
    try:
        done = {name: p.communicate(timeout=90) for name, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:  # hung: the behaviour under test
                p.kill()
                p.wait()
    assert time.monotonic() - started < 60
    for name, (out, err) in done.items():
        proc = subprocess.CompletedProcess(commands[name], procs[name].returncode, out, err)
        refused(proc, str(fifo), "not a regular file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"], "something was written"


def test_two_finite_throughputs_far_apart_never_print_an_infinite_ratio(tmp_path: Path) -> None:
    # the figures the issue names: 11,076 msg/s against 1e-308 overflows a float quotient
    a, b = fx.schema2_run(), fx.schema2_run()
    for s in a["steps"]:
        s["throughput"]["mean"] = 1e-308
    for s in b["steps"]:
        s["throughput"]["mean"] = 11076.0
    pa, pb = fx.write(tmp_path / "a.json", a), fx.write(tmp_path / "b.json", b)
    for args in (["compare", str(pa), str(pb)], ["compare", "--markdown", str(pa), str(pb)],
                 ["compare", str(pb), str(pa)]):  # fmt: skip
        proc = mqlab(*args)
        assert proc.returncode == 0, proc.stderr
        assert "inf" not in proc.stdout.lower() and "nan" not in proc.stdout.lower(), proc.stdout
    mixed = fx.schema2_run()
    mixed["steps"][1]["throughput"]["mean"] = 1e-308  # pika's beside kombu's 1,000 msg/s
    pm = fx.write(tmp_path / "m.json", mixed)
    for args in (["show", str(pm)], ["show", "--markdown", str(pm)], ["report", str(pm)]):
        proc = mqlab(*args)
        assert proc.returncode == 0, proc.stderr
        assert "infx" not in proc.stdout and "nanx" not in proc.stdout, proc.stdout
    page = (tmp_path / "m.html").read_text(encoding="utf-8")
    assert "infx" not in page and "nanx" not in page
