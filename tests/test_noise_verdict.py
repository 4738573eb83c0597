"""compare's verdict on a difference (issue 42): a t-test's answer across repeats, and no
answer where none can be given: two lower bounds, or one run a side on a contended machine.

The t-test's known answers are Go's benchstat (internal/stats/ttest_test.go): Welch's test
of [2, 1, 3, 4] against [6, 5, 7, 9] gives p = 0.0085, and a sample against itself p = 1.
"""

from __future__ import annotations

from mqlab.measure.noise import CONTENDED, LOWER_BOUNDS, NOISE_UNKNOWN, WITHIN, Side, verdict

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
