"""The report as a person opens it: rendered in headless Chromium, offline, every chart drawn.

Chromium is Debian's `chromium` package (scripts/setup.sh installs it); a missing
browser fails the test with the command that installs it, it is never skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import results_fixtures as fx
from tests.helpers import mqlab, results, write_profile

PROFILE = """
[run]
name = "report-e2e"
duration = "2s"
warmup = "500ms"
drain = "2s"

[drivers.lb]
plugin = "loopback"

[[scenario]]
pattern = "call"
concurrency = [2, 4]

[[scenario]]
pattern = "notify"
rate = [300]
"""


def _chromium(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is not installed: run `bash scripts/setup.sh test` "
                    "(or apt-get install chromium)", pytrace=False)  # fmt: skip
    # root (CI) cannot use Chromium's sandbox; no network: the report must not need one
    flags = ["--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]  # fmt: skip
    if os.geteuid() == 0:
        flags.append("--no-sandbox")
    return subprocess.run(
        [exe, *flags, *args], capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _drawn_charts(report: Path) -> tuple[int, list[str]]:
    """How many charts the page holds, and the ids of those Chromium drew with data in them."""
    proc = _chromium("--virtual-time-budget=20000", "--dump-dom", report.as_uri())
    dom = proc.stdout
    assert "<body" in dom, proc.stderr[-2000:]
    expected = int(re.search(r'data-charts="(\d+)"', dom).group(1))  # type: ignore[union-attr]
    drawn = []
    starts = [(m.start(), m.group(1)) for m in re.finditer(r'<div id="(chart-\d+)"', dom)]
    for i, (at, chart_id) in enumerate(starts):
        chunk = dom[at : starts[i + 1][0] if i + 1 < len(starts) else len(dom)]
        # plotly draws into <svg class="main-svg">; a trace with data has a path with points
        has_svg = 'class="main-svg"' in chunk
        has_trace = re.search(r'class="trace (scatter|bars)[^"]*".*?<path[^>]* d="M', chunk, re.S)
        if has_svg and has_trace:
            drawn.append(chart_id)
    return expected, drawn


def _screenshot(page: Path, out: Path) -> int:
    _chromium("--virtual-time-budget=20000", "--window-size=1400,3000",
              f"--screenshot={out}", page.as_uri())  # fmt: skip
    assert out.exists(), f"chromium wrote no screenshot of {page}"
    return out.stat().st_size


def test_report_of_a_real_run_draws_every_chart(tmp_path: Path) -> None:
    profile = write_profile(tmp_path / "p.toml", PROFILE)
    out = tmp_path / "run.json"
    proc = mqlab("run", str(profile), "-o", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert len(results(out)["steps"]) == 3
    proc = mqlab("report", str(out))
    assert proc.returncode == 0, proc.stderr
    expected, drawn = _drawn_charts(tmp_path / "run.html")
    # 2 against load (closed, open), 1 CPU, 3 timelines, 3 percentile spectra (from the
    # histograms each step stores)
    assert expected == 9
    assert drawn == [f"chart-{i}" for i in range(1, expected + 1)]


def test_schema_2_report_draws_every_chart_and_is_not_blank(tmp_path: Path) -> None:
    src = fx.write(tmp_path / "r.json", fx.schema2_run())
    assert mqlab("report", str(src)).returncode == 0
    expected, drawn = _drawn_charts(tmp_path / "r.html")
    assert expected == 18
    assert drawn == [f"chart-{i}" for i in range(1, expected + 1)]
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>", encoding="utf-8")
    # a PNG of lines, bars and text compresses far worse than an empty page of one colour
    assert _screenshot(tmp_path / "r.html", tmp_path / "r.png") > 5 * _screenshot(
        blank, tmp_path / "blank.png"
    )
