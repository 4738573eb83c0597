"""The report as a person opens it: rendered in headless Chromium, offline, every chart drawn.

Chromium is Debian's `chromium` package (scripts/setup.sh installs it); a missing
browser fails the test with the command that installs it, it is never skipped.
"""

from __future__ import annotations

import html
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

[drivers.lb2]
plugin = "loopback"

[[scenario]]
pattern = "call"
concurrency = [2]

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


def _dom(report: Path) -> str:
    """The page as Chromium holds it after its scripts ran."""
    proc = _chromium("--virtual-time-budget=20000", "--dump-dom", report.as_uri())
    assert "<body" in proc.stdout, proc.stderr[-2000:]
    return proc.stdout


def _drawn_charts(dom: str, drivers: set[str]) -> tuple[int, list[str]]:
    """How many charts the page holds, and the ids of those Chromium drew with data in them,
    a title and a legend naming a driver."""
    expected = int(re.search(r'data-charts="(\d+)"', dom).group(1))  # type: ignore[union-attr]
    drawn = []
    starts = [(m.start(), m.group(1)) for m in re.finditer(r'<div id="(chart-\d+)"', dom)]
    for i, (at, chart_id) in enumerate(starts):
        chunk = dom[at : starts[i + 1][0] if i + 1 < len(starts) else len(dom)]
        # plotly draws into <svg class="main-svg">; a trace with data has a path with points
        has_svg = 'class="main-svg"' in chunk
        has_trace = re.search(r'class="trace (scatter|bars)[^"]*".*?<path[^>]* d="M', chunk, re.S)
        title = re.search(r'<text class="gtitle"[^>]*>([^<]+)<', chunk)
        legend = re.findall(r'<text class="legendtext"[^>]*>([^<]+)<', chunk)
        named = any(d in entry.split() for entry in legend for d in drivers)
        if has_svg and has_trace and title and title.group(1).strip() and named:
            drawn.append(chart_id)
    return expected, drawn


def _text(dom: str, start: str, end: str) -> str:
    """The visible text between two headings."""
    part = dom[dom.index(start) : dom.index(end)]
    return html.unescape(re.sub(r"<[^>]+>", " ", part))


def _screenshot(page: Path, out: Path) -> int:
    _chromium("--virtual-time-budget=20000", "--window-size=1400,3000",
              f"--screenshot={out}", page.as_uri())  # fmt: skip
    assert out.exists(), f"chromium wrote no screenshot of {page}"
    return out.stat().st_size


def test_report_of_a_real_run_opens_with_its_summary_and_draws_every_chart(
    tmp_path: Path,
) -> None:
    profile = write_profile(tmp_path / "p.toml", PROFILE)
    out = tmp_path / "run.json"
    proc = mqlab("run", str(profile), "-o", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert len(results(out)["steps"]) == 4
    proc = mqlab("report", str(out))
    assert proc.returncode == 0, proc.stderr
    dom = _dom(tmp_path / "run.html")
    # what a reader wants first: the question, drivers side by side, the findings
    first = [m.group(1) for m in re.finditer(r"<h2>([^<]+)</h2>", dom)][:3]
    assert first == ["The question", "Summary", "Environment"]
    question = _text(dom, "<h2>The question</h2>", "<h2>Summary</h2>")
    assert "lb and lb2" in question and "call at c=2" in question and "notify at 300/s" in question
    summary = _text(dom, "<h2>Summary</h2>", "<h3>Findings</h3>")
    assert "lb2/lb msg/s" in summary and re.search(r"\d\.\d\dx", summary)
    findings = re.findall(r"<li>(.*?)</li>", dom[dom.index('class="findings"') :])
    assert any(f.startswith("Call: at c=2 ") for f in findings), findings
    assert any(f.startswith("No step lost") for f in findings), findings
    # the environment is a table of facts, libraries one a row; no broker, so no broker URL
    env = _text(dom, "<h2>Environment</h2>", "<h2>Comparison</h2>")
    assert "library" in env and re.search(r"\bmsgpack\s+\d+\.\d+", env) and "{" not in env
    assert "URL" not in env and "amqp://" not in env
    # the comparison is an HTML table, not a text block
    assert '<table class="comparison">' in dom and "<pre" not in dom
    expected, drawn = _drawn_charts(dom, {"lb", "lb2"})
    # 2 against load (closed, open), 1 CPU, 4 timelines, 2 percentile spectra (from the
    # histograms each step stores)
    assert expected == 9
    assert drawn == [f"chart-{i}" for i in range(1, expected + 1)]


def test_schema_2_report_states_its_findings_draws_every_chart_and_is_not_blank(
    tmp_path: Path,
) -> None:
    src = fx.write(tmp_path / "r.json", fx.schema2_run())
    assert mqlab("report", str(src)).returncode == 0
    dom = _dom(tmp_path / "r.html")
    findings = " ".join(re.findall(r"<li>(.*?)</li>", dom[dom.index('class="findings"') :]))
    findings = html.unescape(findings)
    assert "at c=5 pika was fastest, 1,500 msg/s, 1.50x kombu" in findings
    assert "lost 7 of 3,600" in findings and "broken (retry = 0: no duplicates)" in findings
    assert "could not keep up" in findings
    # a ratio of a lower bound is marked as one
    assert re.search(r"≥\s+222\.22x", _text(dom, "<h2>Summary</h2>", "<h3>Findings</h3>"))
    env = _text(dom, "<h2>Environment</h2>", "<h2>Comparison</h2>")
    assert "amqp://guest:***@127.0.0.1:5672/" in env  # a broker: its URL, masked
    expected, drawn = _drawn_charts(dom, {"pika", "kombu"})
    assert expected == 18
    assert drawn == [f"chart-{i}" for i in range(1, expected + 1)]
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>", encoding="utf-8")
    # a PNG of lines, bars and text compresses far worse than an empty page of one colour
    assert _screenshot(tmp_path / "r.html", tmp_path / "r.png") > 5 * _screenshot(
        blank, tmp_path / "blank.png"
    )
