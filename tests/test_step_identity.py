"""A step's identity and the noise rule, as a user publishing figures meets them.

Two scenarios that share a name (both unnamed casts) but differ in their definition
are two steps: never one aggregate of "repeats", never one row of a comparison.
And a difference the repeats show clearly is not called noise.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from tests import results_fixtures as fx
from tests.helpers import mqlab, results, write_profile

TWO_UNNAMED_CASTS = """
[run]
duration = "1s"
warmup = "0s"
drain = "2s"
repeat = 2
[drivers.lb]
plugin = "loopback"
[[scenario]]
pattern = "cast"
concurrency = 1
envelope = false
[[scenario]]
pattern = "cast"
concurrency = 1
envelope = true
[[scenario]]  # the first one again, word for word: a step of its own, not a third repeat
pattern = "cast"
concurrency = 1
envelope = false
"""


def test_unnamed_scenarios_that_differ_are_two_aggregates_and_two_compare_rows(
    tmp_path: Path,
) -> None:
    out = tmp_path / "r.json"
    proc = mqlab("run", str(write_profile(tmp_path / "p.toml", TWO_UNNAMED_CASTS)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = results(out)
    assert len(doc["steps"]) == 6 and {s["scenario"] for s in doc["steps"]} == {"cast"}
    # one aggregate per scenario, each of its own two repeats; never one of four or six
    aggs = doc["aggregates"]
    assert sorted((a["envelope"], a["repeats"]) for a in aggs) == [
        (False, 2), (False, 2), (True, 2),
    ]  # fmt: skip
    for a in aggs:
        members = [s for s in doc["steps"] if s["step"] in a["steps"]]
        assert {s["envelope"] for s in members} == {a["envelope"]}
    # the report's summary puts each in a cell of its own, per repeat (3 x 2), none dropped
    from mqlab.report import load_run, summary

    assert len(summary.cells(load_run(out))) == 6
    # compare keeps both, each row saying what tells it from the other
    proc = mqlab("compare", str(out), str(out), "--markdown")
    assert proc.returncode == 0, proc.stderr
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("| lb ")]
    assert len(rows) == 3, proc.stdout  # none dropped
    assert any("envelope=False" in r for r in rows) and any("envelope=True" in r for r in rows)


def _one_cell(steps: list[dict[str, Any]], mean: float, ci95: float) -> dict[str, Any]:
    return {
        "driver": steps[0]["driver"], "scenario": steps[0]["scenario"],
        "pattern": steps[0]["pattern"], "concurrency": steps[0]["concurrency"],
        "rate": steps[0]["rate"], "message_size": steps[0]["message_size"],
        "repeats": 2, "steps": [s["step"] for s in steps],
        "throughput": {"mean": mean, "ci95": ci95, "n": 2},
        "latency_ms": dict(steps[0]["latency_ms"]),
    }  # fmt: skip


def test_compare_uses_welch_t_on_repeats_not_ci95_over_two(tmp_path: Path) -> None:
    # A = 101, B = 111 msg/s, each over 2 repeats with ci95 12.71: se = 12.71 / 12.706
    # = 1.0, t = 10 / sqrt(2) = 7.07 on 2 degrees of freedom (p = 0.019): not noise
    runs = []
    for mean in (101.0, 111.0):
        doc = fx.schema2_run()
        first = copy.deepcopy(doc["steps"][0])
        second = copy.deepcopy(first)
        second["step"], second["repeat"] = 99, 1
        doc["steps"] = [first, second]
        doc["aggregates"] = [_one_cell(doc["steps"], mean, 12.71)]
        runs.append(fx.write(tmp_path / f"{mean:g}.json", doc))
    proc = mqlab("compare", str(runs[0]), str(runs[1]), "--markdown")
    assert proc.returncode == 0, proc.stderr
    (row,) = [ln for ln in proc.stdout.splitlines() if " x2 " in ln]
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    assert cells[4:7] == ["101", "111", "1.10x"], cells
    assert "Welch" in proc.stdout  # the rule is printed with the table


ENVELOPES = """
[run]
duration = "1s"
warmup = "0s"
drain = "2s"
[drivers.lb]
plugin = "loopback"
[[scenario]]
pattern = "cast"
concurrency = [1, 2]
envelope = false
[[scenario]]
pattern = "cast"
concurrency = [1, 2]
envelope = true
"""


def test_scenarios_differing_only_in_envelope_are_two_lines_of_the_reports_charts(
    tmp_path: Path,
) -> None:
    from mqlab.report import charts, load_run

    out = tmp_path / "r.json"
    proc = mqlab("run", str(write_profile(tmp_path / "p.toml", ENVELOPES)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    run = load_run(out)
    assert {s.cell.scenario for s in run.steps} == {"cast"}  # one name, two definitions
    [(_, fig)] = charts.load_figures(run.steps)
    # the throughput lines (the first row's traces): one per definition, each over both loads
    lines = {t.name: list(t.x) for t in fig.data if t.yaxis in ("y", None) and t.error_y.array}
    assert lines == {
        "lb [envelope=False]": [1.0, 2.0], "lb [envelope=True]": [1.0, 2.0],
    }, lines  # fmt: skip
    # the CPU chart: a cell per definition and load, never two steps drawn as one bar
    cpu = charts.cpu_figure(run.steps)
    assert cpu is not None
    clients = next(t for t in cpu.data if t.name == "lb clients")
    assert len(set(clients.x)) == 4 and any("envelope=False" in x for x in clients.x), clients.x
    page = tmp_path / "r.html"
    assert mqlab("report", str(out), "-o", str(page)).returncode == 0
    assert "envelope=False" in page.read_text() and "envelope=True" in page.read_text()


OPTION = """
[run]
duration = "1s"
warmup = "0s"
drain = "2s"
[drivers.lb]
plugin = "loopback"
{option}
[[scenario]]
pattern = "cast"
concurrency = 1
"""


def test_compare_lists_a_driver_option_that_differs_and_matches_no_step_across_it(
    tmp_path: Path,
) -> None:
    runs = []
    for name, option in (("default", ""), ("small", "queue_size = 1")):
        out = tmp_path / f"{name}.json"
        profile = write_profile(tmp_path / f"{name}.toml", OPTION.format(option=option))
        proc = mqlab("run", str(profile), "-o", str(out))
        assert proc.returncode == 0, proc.stderr
        runs.append(out)
    [step] = results(runs[1])["steps"]
    assert step["options"] == {"queue_size": 1}  # as the driver ran: defaults filled
    proc = mqlab("compare", str(runs[0]), str(runs[1]))
    assert proc.returncode == 0, proc.stderr
    assert "Same environment" not in proc.stdout
    assert "driver.lb.queue_size: 1024 -> 1" in proc.stdout, proc.stdout
    # a step with another option is another step: not matched, each on its own side
    assert "only in A" in proc.stdout and "only in B" in proc.stdout, proc.stdout
    same = mqlab("compare", str(runs[0]), str(runs[0]))
    assert "Same environment" in same.stdout and "only in" not in same.stdout, same.stdout
