"""compare's verdict on a difference (issue 42): a t-test's answer across repeats, and no
answer where none can be given: two lower bounds, or one run a side on a contended machine;
the rule itself, and `mqlab compare` over stored results files whose answer is known.

The t-test's known answers are Go's benchstat (internal/stats/ttest_test.go): Welch's test
of [2, 1, 3, 4] against [6, 5, 7, 9] gives p = 0.0085, and a sample against itself p = 1.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from mqlab.measure.noise import CONTENDED, LOWER_BOUNDS, NOISE_UNKNOWN, WITHIN, Side, verdict
from mqlab.record.step import StepRecord
from tests import results_fixtures as fx
from tests.helpers import mqlab

S1, S2 = [2.0, 1.0, 3.0, 4.0], [6.0, 5.0, 7.0, 9.0]


def test_repeats_that_differ_beyond_their_run_to_run_spread_differ() -> None:
    # p = 0.0085 < 0.05: significant, even though every run was on a contended machine
    a, b = Side.of_runs(S1, contended=True), Side.of_runs(S2, contended=True)
    assert verdict(a, b) == "" and verdict(b, a) == ""


def test_repeats_of_the_same_figures_are_within_noise() -> None:
    assert verdict(Side.of_runs(S1), Side.of_runs(list(reversed(S1)))) == WITHIN
    # the same spread, shifted by a fraction of it: no test calls that a difference
    assert verdict(Side.of_runs(S1), Side.of_runs([v + 0.5 for v in S1])) == WITHIN


def test_one_run_a_side_on_a_contended_machine_is_unknown_not_significant() -> None:
    # two identical loopback runs on a busy machine: p99 3.71 ms against 114 ms, each with a
    # tight per-second spread; the t-test alone would call it a significant 30.7x
    a, b = Side(3.71, 0.05, 10), Side(114.0, 2.0, 10)
    assert verdict(a, b) == ""
    assert verdict(Side(3.71, 0.05, 10, contended=True), b) == CONTENDED
    assert verdict(a, Side(114.0, 2.0, 10, contended=True)) == CONTENDED


def test_two_lower_bounds_are_never_a_significant_difference() -> None:
    # p99 with failures beyond it: at least 1,000 ms against at least 5,000 ms
    a = Side(1000.0, 1.0, 10, censored=True)
    b = Side(5000.0, 1.0, 10, censored=True)
    assert verdict(a, b) == LOWER_BOUNDS and verdict(b, a) == LOWER_BOUNDS


def test_a_lower_bound_is_unknown_below_the_other_side_and_a_difference_above_it() -> None:
    bound = Side(50.0, 1.0, 10, censored=True)  # at least 50 ms
    assert verdict(bound, Side(80.0, 1.0, 10)) == LOWER_BOUNDS  # it may well be 80 too
    assert verdict(bound, Side(10.0, 1.0, 10)) == ""  # at least 50 is more than 10


def test_without_a_spread_the_noise_is_unknown() -> None:
    assert verdict(Side(10.0), Side(20.0, 1.0, 10)) == NOISE_UNKNOWN
    assert verdict(Side.of_runs([10.0]), Side.of_runs([20.0])) == NOISE_UNKNOWN


# -- compare over stored results files whose answer is known -------------------------------


def _call(mean: float, p99_us: int = 9000, repeat: int = 0, stdev: float = 50.0) -> StepRecord:
    step = fx.typed(fx.step(0, "loopback", "call", 10, mean=mean, stdev=stdev, p99_us=p99_us))
    return dataclasses.replace(step, repeat=repeat)


def _compare(tmp_path: Path, a: dict[str, Any], b: dict[str, Any]) -> dict[str, list[str]]:
    """`mqlab compare A B --markdown`: each row's cells, by its load."""
    pa, pb = fx.write(tmp_path / "a.json", a), fx.write(tmp_path / "b.json", b)
    done = mqlab("compare", str(pa), str(pb), "--markdown")
    assert done.returncode == 0, done.stderr
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in done.stdout.splitlines()
        if line.startswith("| loopback")
    ]
    return {r[2]: r for r in rows}


def test_two_identical_runs_under_load_are_unknown_and_quiet_ones_within_noise(
    tmp_path: Path,
) -> None:
    busy = _compare(
        tmp_path, fx.schema3_run([_call(1000.0)], True), fx.schema3_run([_call(1000.0)], True)
    )
    row = busy["c=10"]
    assert [row[6], row[9], row[12]] == ["1.00x (unknown (contended))"] * 3, row
    assert "A contended (others 87 %" in row[-1] and "B contended (others 87 %" in row[-1]
    quiet = _compare(
        tmp_path, fx.schema3_run([_call(1000.0)], False), fx.schema3_run([_call(1000.0)], False)
    )
    assert [quiet["c=10"][i] for i in (6, 9, 12)] == ["1.00x (within noise)"] * 3


def test_one_run_a_side_on_a_busy_machine_is_no_30x_difference(tmp_path: Path) -> None:
    # the two identical loopback runs: p99 3.71 ms against 114 ms, each with a tight
    # per-second spread; on a quiet machine the t-test's answer stands (a difference)
    a, b = [_call(1000.0, p99_us=3710)], [_call(1000.0, p99_us=114_000)]
    busy = _compare(tmp_path, fx.schema3_run(a, True), fx.schema3_run(b, True))
    assert busy["c=10"][12] == "30.73x (unknown (contended))"
    quiet = _compare(tmp_path, fx.schema3_run(a, False), fx.schema3_run(b, False))
    assert quiet["c=10"][12] == "30.73x"
    # a file from before issue 42 says nothing of its machine: the test answers
    old = _compare(tmp_path, fx.schema3_run(a), fx.schema3_run(b))
    assert old["c=10"][12] == "30.73x"


def test_repeats_take_the_t_tests_answer_from_their_run_to_run_spread(tmp_path: Path) -> None:
    # benchstat's known answer (p = 0.0085), each figure x1000 msg/s; every repeat measured on a
    # contended machine with a per-second spread of 1 msg/s: the repeats' spread decides
    def runs(means: list[float]) -> dict[str, Any]:
        steps = [_call(m, repeat=i, stdev=1.0) for i, m in enumerate(means)]
        return fx.schema3_run(steps, contended=True)

    a = runs([v * 1000 for v in S1])
    differ = _compare(tmp_path, a, runs([v * 1000 for v in S2]))
    assert differ["c=10 x4"][6] == "2.70x", differ
    shifted = _compare(tmp_path, a, runs([v * 1000 + 500 for v in S1]))
    assert shifted["c=10 x4"][6] == "1.20x (within noise)", shifted


def test_two_lower_bounds_are_no_difference_in_compare(tmp_path: Path) -> None:
    def bound(ms: float) -> dict[str, Any]:
        s = _call(1000.0)
        lat = dataclasses.replace(s.figures.latency_ms, p99=ms, censored=("p99",))
        return fx.schema3_run(
            [dataclasses.replace(s, figures=dataclasses.replace(s.figures, latency_ms=lat))],
            False,
        )

    assert _compare(tmp_path, bound(1000.0), bound(5000.0))["c=10"][12] == (
        "5.00x (unknown (lower bounds))"
    )
