"""`mqlab report`: what a reader of the HTML sees, from schema 1 and schema 2 results files."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from mqlab.report import load_run, render
from mqlab.report.charts import spectrum_points, timeline_figure
from tests import results_fixtures as fx
from tests.helpers import mqlab


class _Loads(HTMLParser):
    """Every src/href attribute of an element, and every script's src (script text is not HTML)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline_scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = [v for k, v in attrs if k in ("src", "href") and v]
        self.urls += found
        if tag == "script" and not found:
            self.inline_scripts += 1


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def _report(tmp_path: Path, doc: dict[str, object], name: str = "run.json") -> str:
    return render(load_run(fx.write(tmp_path / name, doc)))


def test_report_loads_nothing_from_the_network(tmp_path: Path) -> None:
    html = _report(tmp_path, fx.schema2_run())
    page = _Loads()
    page.feed(html)
    assert [u for u in page.urls if re.match(r"(https?:)?//", u)] == []
    # plotly.js itself is in the page: without it no chart would draw offline
    assert page.inline_scripts > 1 and "Plotly.newPlot" in html and len(html) > 1_000_000


def test_trouble_is_shown_beside_the_step(tmp_path: Path) -> None:
    text = _text(_report(tmp_path, fx.schema2_run()))
    section = text[text.index("6. pika notify (notify) 1000/s") :]
    assert "could_not_keep_up : could not keep up: 90% of 1000/s" in section
    assert "lost 7, duplicates 3, unaccounted 11 (still queued 4)" in section
    assert "kill-node" in section  # the event is listed under the step
    assert "not_sent 400" in section and "kept_up False" in section


def test_a_steps_account_is_shown_beside_it_bucket_by_bucket(tmp_path: Path) -> None:
    doc = fx.schema2_run()
    step = doc["steps"][5]  # type: ignore[index]
    step["account"] = {
        "expected": 100, "delivered": 70, "duplicated": 3, "lost": 7, "unexplained": 5,
        "held": 4, "still_queued": 4, "unaccounted": 12, "slowest_ms": 3.5, "drain_end": "held",
        "held_by": [{"reason": "cut node1", "messages": 4}],
        "unaccounted_why": [{"reason": "the depth of q was read 2.0 s before", "messages": 12}],
    }  # fmt: skip
    text = _text(_report(tmp_path, doc))
    section = text[text.index("6. pika notify (notify) 1000/s") :]
    assert (
        "account of 100: delivered 70, duplicated 3, lost 7 (unexplained 5 ), held 4, still "
        "queued 4, unaccounted 12 (4 cut node1; 12 the depth of q was read 2.0 s before)"
    ) in section


def test_censored_percentiles_read_as_lower_bounds(tmp_path: Path) -> None:
    text = _text(_report(tmp_path, fx.schema2_run()))
    row = text[text.index("6 pika notify (notify) 1000/s") :][:300]
    assert "≥ 2,000" in row and "2.00%" in row  # p99 and max are only lower bounds; failed %


def test_every_figure_section_has_a_chart_for_schema_2(tmp_path: Path) -> None:
    html = _report(tmp_path, fx.schema2_run())
    text = _text(html)
    assert "histograms not stored" not in text
    # call c=5, call c=25, notify 1000/s: one spectrum each; closed + open loop load charts;
    # CPU; six timelines and six charts of the broker node's CPU per second
    assert html.count('class="chart"') == 3 + 2 + 1 + 6 + 6
    assert "rabbit@lab" in html  # CPU per broker node


def test_schema_1_says_the_histograms_were_not_stored(tmp_path: Path) -> None:
    html = _report(tmp_path, fx.schema1_run())
    text = _text(html)
    assert text.count("histograms not stored (this results file (schema 1)") == 3
    assert html.count('class="chart"') == 2 + 1 + 6


def test_missing_figures_stay_missing(tmp_path: Path) -> None:
    doc = fx.schema1_run()
    doc["steps"] = [
        {"step": 0, "driver": "d", "pattern": "cast", "concurrency": 1, "rate": None,
         "scenario": "cast", "lost": 0, "duplicates": 0, "errors": {},
         "throughput": {"mean": None, "stdev": None}, "latency_ms": {"p99": None}}
    ]  # fmt: skip
    text = _text(_report(tmp_path, doc))
    row = text[text.index("1 d cast (cast) c=1") :][:200]
    # every unmeasured figure is "-", none is made up as 0
    assert re.match(r"1 d cast \(cast\) c=1 \? (- ){3}0 0 (- ){3}0 (- ){6}", row), row


def test_credentials_stay_masked(tmp_path: Path) -> None:
    html = _report(tmp_path, fx.schema2_run())
    assert fx.MASKED_URL in html and "guest:guest" not in html


def test_spectrum_shows_the_tail_the_percentiles_hide() -> None:
    # 999 fast samples and one slow one: the spectrum must climb to the slow one at its end
    xs, ys, labels = spectrum_points(fx.histogram({1000: 999, 250_000: 1}))
    assert ys[0] == pytest.approx(1.0, rel=0.01) and ys[-1] == pytest.approx(250.0, rel=0.01)
    assert labels[-1] == "max" and xs == sorted(xs) and xs[-1] >= 1000


def test_timeline_marks_events_and_phases(tmp_path: Path) -> None:
    run = load_run(fx.write(tmp_path / "r.json", fx.schema2_run()))
    fig = timeline_figure(run.steps[5], run.duration_s)
    assert fig is not None
    notes = {a.text for a in fig.layout.annotations}
    assert {"kill-node", "before", "after", "window"} <= notes
    assert {t.name for t in fig.data} >= {"pika sent/s", "pika received/s", "pika p99 ms"}


def test_each_fault_event_has_its_figures_and_a_broken_promise_shows_red(
    tmp_path: Path,
) -> None:
    html = _report(tmp_path, fx.schema2_run())
    table = html[html.index('<th class="">detect s</th>') :]
    table = table[: table.index("</table>")]
    tds = table.split('<td class="')[1:]
    cells = [td.split('">', 1)[1].split("</td>")[0] for td in tds]
    # at 1.0 s, detected in 1.0 s by an error, not recovered, no outage or way of failing
    # stored (an older file), 5 errors, 7 lost, 3 dup, 2 timed out
    assert cells[:11] == ["kill-node", "1.0", "1.0", "error", "-", "-", "-", "5", "7", "3", "2"]
    assert cells[11] == '<span class="bad">broken: retry = 0: no duplicates</span>'


def test_cli_writes_the_report_beside_the_results(tmp_path: Path) -> None:
    src = fx.write(tmp_path / "pika-vs-kombu.json", fx.schema2_run())
    proc = mqlab("report", str(src))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "pika-vs-kombu.html").stat().st_size > 1_000_000
    assert "18 chart(s)" in proc.stdout


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "no such file"),
        ("not json at all", "not JSON"),
        (json.dumps({"hello": 1}), "not an mqlab results file"),
        (json.dumps({"schema": 99, "steps": []}), "results schema 99 is not one this mqlab reads"),
    ],
)
def test_bad_results_files_get_one_line_and_exit_2(
    tmp_path: Path, content: str | None, says: str
) -> None:
    path = tmp_path / "in.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    for args in (("report", str(path)), ("compare", str(path), str(path))):
        proc = mqlab(*args)
        assert proc.returncode == 2
        assert proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
