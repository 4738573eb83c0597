"""Results files as a careless or hostile hand leaves them (issue 33, class 1).

``show``, ``report`` and ``compare`` read a results file through one strict reader
(mqlab.results.read): a value of the wrong type, out of range, not finite, a histogram
that is not one or inflates past what one can hold, a key that is missing, each is one
``mqlab:`` line naming the file and the field path, exit status 2. The fuzz test mutates
every field of a real results file through a fixed set of values and runs the three
commands in-process on each mutant.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqlab.ceiling import hook
from mqlab.console.cli import main
from mqlab.live import comparison, seedtables
from mqlab.record import shape
from mqlab.report import compare
from mqlab.results import read
from mqlab.results.record import Run

from . import results_fixtures as fx
from .helpers import mqlab, write_profile
from .hostile import strict_json

PROFILE = """[run]
duration = "1s"
warmup = "0s"
drain = "2s"
repeat = 2
[drivers.lb]
plugin = "loopback"
[[scenario]]
pattern = "call"
concurrency = 1
background = { pattern = "notify", rate = 20 }
"""
#: what replaces a field: JSON text, so NaN, Infinity and numbers no parser keeps can be
#: written; DELETE removes the key
DELETE = "<delete>"
MUTANTS = (
    "null", "true", "-1", "0", "1.5", '"x"', '"\\u001b[31m|<b>"', "[]", "{}", "NaN",
    "-Infinity", "1e999", "1" + "0" * 400, DELETE,
)  # fmt: skip
_MARK = "\u0000mutant\u0000"
#: CPU seconds (this process's, so a busy machine does not count): a refusal takes
#: milliseconds, a report of a run's largest file (10,000 steps) about five
SECONDS = 20.0


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real loopback run (two repeats: steps and an aggregate, a background stress), and a
    step with the fields a broker run adds (faults, phases, nodes, open loop), written as
    this mqlab writes it."""
    tmp = tmp_path_factory.mktemp("real")
    out = tmp / "r.json"
    proc = mqlab("run", str(write_profile(tmp / "p.toml", PROFILE)), "-o", str(out), "-q")
    assert proc.returncode == 0, proc.stderr
    doc = strict_json(out)
    troubled = fx.typed(fx.schema2_run()["steps"][5]).to_wire()
    troubled["step"] = len(doc["steps"])
    doc["steps"].append(troubled)
    read.validate(json.loads(json.dumps(doc)))  # the base is a file the reader accepts
    return doc


def _paths(value: Any, spec: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every field the reader declares, and each other key once (free JSON is never read as a
    figure); of a list only its first entry, but every step and aggregate."""
    if path:
        yield path
    if isinstance(spec, shape.Either):
        spec = spec.second if isinstance(value, dict) else spec.first
    if isinstance(value, dict) and isinstance(spec, shape.Record | shape.Table):
        for k, v in value.items():
            sub = spec.fields.get(k) if isinstance(spec, shape.Record) else spec.value
            yield from _paths(v, sub, (*path, k))
    elif isinstance(value, list) and value and isinstance(spec, shape.Seq):
        # every aggregate; of the steps the first (a real one) and the last (every field a
        # broker run adds); of any other list its first entry: its entries share one shape
        entries = {("steps",): (0, len(value) - 1), ("aggregates",): range(len(value))}
        for i in sorted(set(entries.get(path, (0,)))):
            yield from _paths(value[i], spec.item, (*path, i))


def _replaced(value: Any, path: tuple[Any, ...], text: str) -> Any:
    """``value`` with the field at ``path`` marked (or removed): copies along the path only."""
    if not path:
        return _MARK
    key, rest = path[0], path[1:]
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    if not rest and text == DELETE:
        del copy[key]
    else:
        copy[key] = _replaced(value[key], rest, text)
    return copy


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    started = time.process_time()
    code = main(list(args))
    took = time.process_time() - started
    out, err = capsys.readouterr()
    assert took < SECONDS, f"{args}: {took:.1f}s"
    assert "Traceback" not in out + err, (args, err[-2000:])
    return code, out, err


def _refused(code: int, err: str, path: Path) -> str:
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1, (code, err[-2000:])
    assert lines[0].startswith(f"mqlab: {path}"), lines[0]
    return lines[0]


def _figures(run: Run, base: Run) -> None:
    """What show and compare compute from a run, without drawing it on a terminal."""
    steps, aggregates = list(run.steps), list(run.aggregates)
    for records in (steps, aggregates):  # as `mqlab show` draws them: two tables
        comparison.comparison(records)
        comparison.comparison_markdown(records)
    comparison.environment_line(dict(run.environment))
    seedtables.top_rows(steps)
    seedtables.times_rows(steps)
    hook.markdown(steps)
    for a, b in ((base, run), (run, base)):
        compare.table(a, b)
        compare.markdown(a, b)
        list(compare.environment_lines(a, b))


def test_every_field_mutated_is_shown_reported_and_compared_or_refused_in_one_line(
    real: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "base.json"
    base.write_text(json.dumps(real))
    base_run = read.load_run(base)
    path, html = tmp_path / "m.json", tmp_path / "m.html"
    commands = (
        ["show", str(path)],
        ["show", "--markdown", str(path)],
        ["show", "--top", str(path)],
        ["compare", str(base), str(path)],
        ["report", str(path), "-o", str(html)],
    )
    counts = {"refused": 0, "accepted": 0, "commands": 0}
    g = 0
    for where in list(_paths(real, read.DOCUMENT)):
        marked = json.dumps(_replaced(real, where, "")), json.dumps(_replaced(real, where, DELETE))
        for text in MUTANTS:
            g += 1
            if text == DELETE:
                path.write_text(marked[1])
            else:
                path.write_text(marked[0].replace(json.dumps(_MARK), text))
            try:
                run = read.load_run(path)
            except read.ResultsError as exc:
                # one line naming the file and the field; every command says the same
                line, run = str(exc), None
                assert "\n" not in line and line.startswith(f"{path}: "), line
                counts["refused"] += 1
            else:
                assert run is not None
                _figures(run, base_run)
                counts["accepted"] += 1
            if g % 10:
                continue  # the commands themselves: one in ten mutants, each in turn
            args = commands[(g // 10) % len(commands)]
            code, _, err = _run(capsys, *args)
            counts["commands"] += 1
            if run is None:
                assert _refused(code, err, path) == f"mqlab: {line}"
            else:
                assert code == 0, (where, text, err)
    assert counts["refused"] > 1000 and counts["accepted"] > 300, counts


# -- the reader's own refusals: the failing shapes and their neighbours ------------------

_HISTOGRAM = fx.histogram({2000: 900, 9000: 100})


def _bomb(size: int) -> str:
    """A histogram-shaped text whose payload inflates to ``size`` bytes of zeros."""
    payload = zlib.compress(b"\0" * size, 9)
    return base64.b64encode(struct.pack(">II", 0x1C849314, len(payload)) + payload).decode()


def _forged(digits: int, highest: int) -> str:
    """A well-formed histogram with settings mqlab never writes (hdrh would allocate them)."""
    body = struct.pack(">IIIIQQd", 0x1C849313, 0, 0, digits, 1, highest, 1.0)
    payload = zlib.compress(body)
    return base64.b64encode(struct.pack(">II", 0x1C849314, len(payload)) + payload).decode()


@pytest.mark.parametrize(
    ("where", "value", "words"),
    [
        (("steps", 0, "latency_ms"), DELETE, "steps[0].latency_ms: missing"),
        (("steps", 0, "throughput", "mean"), "true", "steps[0].throughput.mean: expected"),
        (("steps", 0, "throughput", "mean"), '"fast"', "steps[0].throughput.mean: expected"),
        (("steps", 0, "throughput", "mean"), "[1]", "steps[0].throughput.mean: expected"),
        (("steps", 0, "throughput", "mean"), "NaN", "not strict JSON (NaN)"),
        (("steps", 0, "throughput", "mean"), "1e999", "steps[0].throughput.mean: expected"),
        (("steps", 0, "throughput", "mean"), "1" + "0" * 400, "a number of 401 characters"),
        (("steps", 0, "throughput", "mean"), "1" + "0" * 5000, "a number of 5,001 characters"),
        (("steps", 0, "throughput", "mean"), "-5", "0 .. 1,000,000,000,000"),
        (("steps", 0, "driver"), "42", "steps[0].driver: expected text"),
        (("steps", 0, "driver"), json.dumps("d" * 5000), "steps[0].driver: expected text"),
        (("steps", 0, "flags"), '[{"code": null}]', "steps[0].flags[0].code: expected text"),
        (("steps", 0, "sent"), "1.5", "steps[0].sent: expected a whole number"),
        (("steps", 0, "histograms", "round_trip"), '"not base64!"', "not base64"),
        (("steps", 0, "histograms", "round_trip"), json.dumps(_bomb(2**24)), "inflates past"),
        (("steps", 0, "histograms", "round_trip"), json.dumps(_forged(5, 2**62)), "settings"),
        (
            ("steps", 0, "series", "sent"),
            json.dumps([0] * (shape.MAX_SECONDS + 1)),
            f"at most {shape.MAX_SECONDS:,} entries",
        ),
        (("schema",), "4", "results schema 4 is not one this mqlab reads"),
        (("schema",), '"2"', 'results schema "2" is not one'),
    ],
)
def test_each_failing_shape_is_refused_in_one_line_naming_the_field(
    real: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    where: tuple[Any, ...],
    value: str,
    words: str,
) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_replaced(real, where, value)).replace(json.dumps(_MARK), value))
    for args in (["show", str(path)], ["report", str(path)], ["compare", str(path), str(path)]):
        line = _refused(*_run(capsys, *args)[::2], path)
        assert words in line, line
    assert not (tmp_path / "r.html").exists()


def test_two_finite_throughputs_never_give_an_infinite_ratio(
    real: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = json.loads(json.dumps(real)), json.loads(json.dumps(real))
    # finite, far apart: B/A (compare) and the second driver's ratio to the first (show)
    # would overflow to infinity
    a["steps"][-1]["throughput"]["mean"] = 1e-300
    b["steps"][-1]["throughput"]["mean"] = 1e12
    b["steps"].append({**a["steps"][-1], "driver": "other", "step": len(b["steps"])})
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    for args in (
        ["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")],
        ["compare", "--markdown", str(tmp_path / "a.json"), str(tmp_path / "b.json")],
        ["show", str(tmp_path / "b.json")],
        ["show", "--markdown", str(tmp_path / "b.json")],
    ):
        code, out, err = _run(capsys, *args)
        assert code == 0, err
        assert "infx" not in out and "nanx" not in out, out


def test_a_results_file_at_the_limits_of_a_run_reads_and_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = fx.schema2_run()
    first = doc["steps"][0]
    doc["steps"] = [
        {**first, "step": i, "concurrency": 1 + i % 100, "repeat": i // 100}
        for i in range(shape.MAX_STEPS)
    ]
    path = fx.write(tmp_path / "big.json", doc)
    code, _, err = _run(capsys, "report", str(path), "-o", str(tmp_path / "big.html"))
    assert code == 0, err
    page = (tmp_path / "big.html").read_text()
    assert "per-second charts for the first 100 steps of 10,000" in page
    doc["steps"].append({**first, "step": 0})
    fx.write(path, doc)
    line = _refused(*_run(capsys, "show", str(path))[::2], path)
    assert "steps: expected a list of at most 10,000 entries" in line, line


# -- class 3: output that cannot be hijacked or lost -----------------------------------


def test_report_refuses_a_symlink_even_a_dangling_one(
    real: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "r.json"
    results.write_text(json.dumps(real))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    good = elsewhere / "old.html"
    assert _run(capsys, "report", str(results), "-o", str(good))[0] == 0
    before = good.read_bytes()
    for target in (elsewhere / "new.html", good):  # dangling, then to a report of mqlab's
        link = tmp_path / f"link-{target.name}"
        link.symlink_to(target)
        line = _refused(*_run(capsys, "report", str(results), "-o", str(link))[::2], link)
        assert "symbolic link" in line and str(link) in line, line
    assert not (elsewhere / "new.html").exists() and good.read_bytes() == before


def test_a_full_disk_leaves_the_previous_report_whole(real: dict[str, Any], tmp_path: Path) -> None:
    import resource
    import signal
    import subprocess
    import sys

    from .helpers import ROOT

    results = tmp_path / "r.json"
    results.write_text(json.dumps(real))
    out = tmp_path / "r.html"
    assert mqlab("report", str(results), "-o", str(out)).returncode == 0
    before = out.read_bytes()
    limit = len(before) // 3

    def small_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run(
        [sys.executable, "-m", "mqlab.console.cli", "report", str(results), "-o", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, preexec_fn=small_disk,
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"mqlab: cannot write the report to {out}"), proc.stderr
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "r.json"]


_NAMES = {"driver": "<script>x</script>|lb", "scenario": "a|b <b>c</b>"}


def _tables(text: str) -> list[list[str]]:
    """The Markdown tables of a text: runs of lines that start with "|"."""
    out: list[list[str]] = []
    previous = False
    for line in text.splitlines():
        is_row = line.startswith("|")
        if is_row and not previous:
            out.append([])
        if is_row:
            out[-1].append(line)
        previous = is_row
    return out


def test_markdown_escapes_html_and_pipes_in_every_name(
    real: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(json.dumps(real))
    doc["profile"]["run"]["name"] = "<img src=x onerror=alert(1)>|run"
    for s in doc["steps"]:
        s.update(_NAMES)
    for a in doc.get("aggregates", []):
        a.update(_NAMES)
    doc["environment"]["cpu_model"] = "<iframe>|cpu"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    base = tmp_path / "base.json"
    base.write_text(json.dumps(real))
    for args in (
        ["show", "--markdown", str(path)],
        ["compare", "--markdown", str(base), str(path)],
    ):
        code, out, err = _run(capsys, *args)
        assert code == 0, err
        for tag in ("<script", "<b>", "<img", "<iframe"):
            assert tag not in out, (args, out)
        assert "&lt;script>x&lt;/script>\\|lb" in out, out
        for table in _tables(out):
            # as many cells in every row as in its head: no name shifted a figure
            cells = {len(re.findall(r"(?<!\\)\|", row)) for row in table}
            assert len(cells) == 1, table
