"""Results files of schema 1 and 2 still open in every reader: show, report, compare, export.

The stored samples (tests/data): a schema-2 file written by `mqlab run` before the
typed record (profiles/quickstart.toml, loopback and zmq), and the schema-1 and schema-2
files of tests/results_fixtures.py (pika against kombu, with a troubled step: faults,
phases, flags, an open loop that fell behind). Each is read into today's record types
(mqlab.record.legacy); a figure it does not hold stays "-".
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from mqlab.results.read import load_run
from tests.helpers import ROOT, mqlab

DATA = ROOT / "tests" / "data"
SAMPLES = ("results-schema1.json", "results-schema2.json", "results-schema2-quickstart.json")


@pytest.mark.parametrize("name", SAMPLES)
def test_an_older_file_is_shown_reported_exported_and_compared(name: str, tmp_path: Path) -> None:
    path = DATA / name
    doc = json.loads(path.read_text())
    run = load_run(path)
    assert run.schema == doc["schema"] < 3 and len(run.steps) == len(doc["steps"])
    for stored, step in zip(doc["steps"], run.steps, strict=True):
        assert (step.cell.driver, step.figures.throughput.mean) == (
            stored["driver"], stored["throughput"]["mean"],
        )  # fmt: skip
        assert step.figures.lost == stored.get("lost")
    for extra in ((), ("--markdown",), ("--top",)):
        args = ["show", *extra, str(path)]
        proc = mqlab(*args)
        assert proc.returncode == 0, (args, proc.stderr)
        assert doc["steps"][0]["driver"] in proc.stdout
    page = tmp_path / "r.html"
    proc = mqlab("report", str(path), "-o", str(page))
    assert proc.returncode == 0, proc.stderr
    assert f"(results schema {doc['schema']})" in page.read_text()
    proc = mqlab("export", str(path), "--csv", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    with (tmp_path / f"{path.stem}.steps.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["driver"] for r in rows] == [s["driver"] for s in doc["steps"]]
    proc = mqlab("compare", str(path), str(path))
    assert proc.returncode == 0, proc.stderr
    assert "only in" not in proc.stdout and "Same environment" in proc.stdout


def test_a_schema_2_run_and_a_schema_3_run_of_one_profile_are_compared_step_by_step(
    tmp_path: Path,
) -> None:
    old = DATA / "results-schema2-quickstart.json"
    new = tmp_path / "new.json"
    proc = mqlab(
        "run", "profiles/quickstart.toml", "--duration", "1s", "--warmup", "0s", "-o", str(new)
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(new.read_text())["schema"] == 3
    proc = mqlab("compare", str(old), str(new), "--markdown")
    assert proc.returncode == 0, proc.stderr
    # every step matched (the old file records no driver options: they are left out of
    # both sides' identities), the differences listed (the window), none called the same
    assert "only in" not in proc.stdout, proc.stdout
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith(("| loopback ", "| zmq "))]
    assert len(rows) == 6, proc.stdout
    assert "run.duration: 3.0 -> 1.0" in proc.stdout, proc.stdout
