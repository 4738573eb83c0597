"""Results files as a careless or hostile hand leaves them (issue 33, class 1).

``show``, ``report`` and ``compare`` read a results file through one strict reader
(mqlab.results.read): a value of the wrong type, out of range, not finite, a histogram
that is not one or inflates past what one can hold, a key that is missing, each is one
``mqlab:`` line naming the file and the field path, exit status 2. The fuzz test mutates
every field of a real results file through a fixed set of values and runs the three
commands in-process on each mutant.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqlab.ceiling import hook
from mqlab.console.cli import main
from mqlab.live import tables
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
#: a refusal or a report of a small file: far below this, whatever the machine's load
SECONDS = 20.0


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real loopback run (two repeats: steps and an aggregate, a background stress), and a
    step with every schema-2 field a broker run adds (faults, phases, nodes, open loop)."""
    tmp = tmp_path_factory.mktemp("real")
    out = tmp / "r.json"
    proc = mqlab("run", str(write_profile(tmp / "p.toml", PROFILE)), "-o", str(out), "-q")
    assert proc.returncode == 0, proc.stderr
    doc = strict_json(out)
    troubled = fx.schema2_run()["steps"][5]
    troubled["step"] = len(doc["steps"])
    doc["steps"].append(troubled)
    read.validate(json.loads(json.dumps(doc)))  # the base is a file the reader accepts
    return doc


def _paths(value: Any, spec: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every field the reader declares, and each other key once (free JSON is never read as a
    figure); of a list only its first entry, but every step and aggregate."""
    if path:
        yield path
    if isinstance(spec, read.Either):
        spec = spec.second if isinstance(value, dict) else spec.first
    if isinstance(value, dict) and isinstance(spec, read.Record | read.Table):
        for k, v in value.items():
            sub = spec.fields.get(k) if isinstance(spec, read.Record) else spec.value
            yield from _paths(v, sub, (*path, k))
    elif isinstance(value, list) and value and isinstance(spec, read.Seq):
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
    started = time.monotonic()
    code = main(list(args))
    took = time.monotonic() - started
    out, err = capsys.readouterr()
    assert took < SECONDS, f"{args}: {took:.1f}s"
    assert "Traceback" not in out + err, (args, err[-2000:])
    return code, out, err


def _refused(code: int, err: str, path: Path) -> str:
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1, (code, err[-2000:])
    assert lines[0].startswith(f"mqlab: {path}: "), lines[0]
    return lines[0]


def _figures(run: Run, base: Run) -> None:
    """What show and compare compute from a run, without drawing it on a terminal."""
    steps, aggregates = list(run.raw_steps), list(run.raw_aggregates)
    for records in (steps, aggregates):  # as `mqlab show` draws them: two tables
        tables.comparison(records)
        tables.comparison_markdown(records)
    tables.environment_line(run.environment)
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
                _figures(run, base_run)
                counts["accepted"] += 1
            if g % 3:
                continue  # the commands themselves: one in three mutants, in turn
            args = commands[(g // 3) % len(commands)]
            code, _, err = _run(capsys, *args)
            counts["commands"] += 1
            if run is None:
                assert _refused(code, err, path) == f"mqlab: {line}"
            else:
                assert code == 0, (where, text, err)
    assert counts["refused"] > 1000 and counts["accepted"] > 300, counts
