"""`mqlab export RESULTS.json --csv DIR`: a run as CSV, one row per step, one per second."""

from __future__ import annotations

import csv
from pathlib import Path

from tests import results_fixtures as fx
from tests.helpers import mqlab


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_steps_and_seconds_as_csv_rows_with_the_results_figures(tmp_path: Path) -> None:
    doc = fx.schema2_run()
    doc["steps"][1]["errors"] = {"CallTimeout": 4}
    doc["steps"][5]["account"] = {
        "expected": 100, "delivered": 70, "duplicated": 3, "lost": 7, "unexplained": 5,
        "held": 4, "still_queued": 4, "unaccounted": 12, "slowest_ms": None, "drain_end": "held",
    }  # fmt: skip
    src = fx.write(tmp_path / "run.json", doc)
    proc = mqlab("export", str(src), "--csv", str(tmp_path / "csv"))
    assert proc.returncode == 0, proc.stderr
    steps = _read(tmp_path / "csv" / "run.steps.csv")
    assert len(steps) == len(doc["steps"])
    for row, s in zip(steps, doc["steps"], strict=True):
        assert row["step"] == str(s["step"] + 1) and row["driver"] == s["driver"]
        for key in ("sent", "received", "lost", "duplicates", "unaccounted"):
            assert row[key] == str(s[key]), key
        assert float(row["throughput_mean"]) == s["throughput"]["mean"]
        assert float(row["p99_ms"]) == s["latency_ms"]["p99"]
    # errors by kind, one column each; a loss and a flag are there to be seen
    assert [r["errors:CallTimeout"] for r in steps] == ["0", "4", "0", "0", "0", "0"]
    assert steps[5]["lost"] == "7" and steps[5]["flags"] == "could_not_keep_up"
    assert steps[5]["censored"] == "p99 p999 max"
    # the account's held and unexplained beside lost; blank where no account was kept
    assert (steps[5]["held"], steps[5]["unexplained"], steps[0]["held"]) == ("4", "5", "")
    assert steps[5]["concurrency"] == "" and steps[5]["rate"] == "1000.0"  # not a made-up 0
    series = _read(tmp_path / "csv" / "run.series.csv")
    assert len(series) == sum(len(s["series"]["sent"]) for s in doc["steps"])
    first = [r for r in series if r["step"] == "1"]
    assert [r["t_s"] for r in first] == ["-1", "0", "1", "2"]  # from the window's start
    assert [r["sent"] for r in first] == ["1000"] * 4
    assert first[0]["p50_ms"] == "" and float(first[1]["p50_ms"]) == 2.0  # none that second
    assert "(6 rows)" in proc.stdout


def test_bad_input_and_a_foreign_file_are_one_line_and_exit_2(tmp_path: Path) -> None:
    src = fx.write(tmp_path / "run.json", fx.schema2_run())
    not_results = tmp_path / "notes.json"
    not_results.write_text("[1, 2]", encoding="utf-8")
    proc = mqlab("export", str(not_results), "--csv", str(tmp_path / "out"))
    assert proc.returncode == 2 and proc.stderr.startswith("mqlab: ")
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "run.steps.csv").write_text("my own numbers\n", encoding="utf-8")
    proc = mqlab("export", str(src), "--csv", str(foreign))
    assert proc.returncode == 2 and "will not overwrite" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert (foreign / "run.steps.csv").read_text(encoding="utf-8") == "my own numbers\n"
    # a second export over its own files is fine
    assert mqlab("export", str(src), "--csv", str(tmp_path / "again")).returncode == 0
    assert mqlab("export", str(src), "--csv", str(tmp_path / "again")).returncode == 0
