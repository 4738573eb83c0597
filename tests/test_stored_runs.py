"""Figures rebuilt from stored runs (issue 42): every table of figures a page marks is what
its command prints over a run kept in docs/runs/, each kept run is a results file mqlab
reads (schema-checked, bounded, with the machine's state), and no hand-copied table of
figures is added to docs/findings.md.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from mqlab.results.read import load_run

ROOT = Path(__file__).resolve().parent.parent
RUNS = sorted((ROOT / "docs" / "runs").rglob("*.json.gz"))
MAX_STORED_BYTES = 1024 * 1024
#: tables in docs/findings.md not between figures comments: the one left is seed 001's own
#: figures, quoted from the seed document (not measured here); it may only go down
UNMARKED_FINDINGS_TABLES = 1


@functools.cache
def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("figures", ROOT / "scripts" / "figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_marked_table_is_what_its_stored_run_prints() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/figures.py"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr


def test_a_figure_changed_by_hand_is_caught_and_rebuilt() -> None:
    figures = _script()
    page = (ROOT / "docs" / "runs" / "README.md").read_text()
    first = figures.blocks(page)[0]
    row = next(ln for ln in first["body"].splitlines() if ln.startswith("| call"))
    touched = page.replace(row, row.replace(" | 0 | 0 |", " | 0 | 7 |", 1), 1)
    assert touched != page
    assert figures.rebuilt(touched) == page  # the run's own figures come back


@pytest.mark.parametrize(
    "command",
    [
        "mqlab run profiles/quickstart.toml --markdown",  # not a reader of stored runs
        "mqlab show docs/runs/quickstart-sample.json.gz",  # not Markdown
        "mqlab show results/mine.json --markdown",  # not a stored run
        "mqlab show /tmp/x.json.gz --markdown",
    ],
)
def test_a_block_reads_stored_runs_only(command: str) -> None:
    with pytest.raises(_script().BlockError):
        _script().checked(command)


def test_each_stored_run_is_a_bounded_results_file_with_the_machines_state() -> None:
    assert RUNS, "docs/runs/ holds no run"
    figures = _script()
    # the runs the pages' blocks read, a glob expanded as the block's command expands it
    quoted = {a for p in figures.pages() for m in figures.blocks(p.read_text())
              for a in figures.checked(m["command"])}  # fmt: skip
    for path in RUNS:
        name = path.relative_to(ROOT)
        assert path.stat().st_size <= MAX_STORED_BYTES, f"{name}: over 1 MiB; store a shorter run"
        run = load_run(path)  # the reader's checks: shape, ranges, histograms
        assert run.steps, f"{name}: no step"
        facts = run.environment.get("system")
        assert facts and all({"what", "state", "off"} <= set(f) for f in facts), (
            f"{name}: no machine state (environment.system); rerun with this mqlab"
        )
        assert str(name) in quoted, f"{name}: no page quotes it"


def _tables(text: str) -> int:
    lines = text.splitlines()
    return sum(
        1
        for i in range(1, len(lines))
        if re.match(r"\|\s*:?-{3}", lines[i]) and lines[i - 1].startswith("|")
    )


def test_no_hand_copied_table_of_figures_is_added_to_findings() -> None:
    text = (ROOT / "docs" / "findings.md").read_text()
    marked = sum(_tables(m["body"]) for m in _script().blocks(text))
    unmarked = _tables(text) - marked
    assert unmarked <= UNMARKED_FINDINGS_TABLES, (
        f"docs/findings.md has {unmarked} tables not built from a stored run: store the run "
        "in docs/runs/ and put its table between figures comments (docs/runs/README.md)"
    )


def test_a_damaged_or_oversized_gzip_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    from mqlab.results.read import MAX_RESULTS_BYTES

    whole = RUNS[0].read_bytes()
    cut, bad, bomb = tmp_path / "cut.json.gz", tmp_path / "bad.json.gz", tmp_path / "bomb.json.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    bad.write_bytes(b"\x1f\x8b" + b"\x00" * 64)
    bomb.write_bytes(gzip.compress(b" " * (MAX_RESULTS_BYTES + 1), compresslevel=1))
    for path, why in ((cut, "cut short"), (bad, "damaged"), (bomb, "larger than")):
        done = subprocess.run(
            [sys.executable, "-m", "mqlab.console.entry", "show", str(path)],
            capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 2 and why in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_the_machines_facts_are_checked_as_the_reader_declares_them(tmp_path: Path) -> None:
    doc = json.loads(gzip.decompress(RUNS[0].read_bytes()))
    doc["environment"]["system"][1]["off"] = "yes"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    done = subprocess.run(
        [sys.executable, "-m", "mqlab.console.entry", "show", str(bad)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2 and "environment.system[1].off" in done.stderr, done.stderr
    # the facts are read back as the record's type, the ones that moved figures marked
    run = load_run(RUNS[0])
    assert run.system and all(f.what and f.state for f in run.system)
