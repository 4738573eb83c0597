"""The noise rule: whether two measured means differ by more than their noise.

A figure is a mean over ``n`` samples (whole seconds of a window, or repeats of a
step) with a standard error ``se``. Two figures differ when Welch's t-test says
so at the 5 % level (two-sided):

    t = |B - A| / sqrt(se_A^2 + se_B^2)
    df = (se_A^2 + se_B^2)^2 / (se_A^4 / (n_A - 1) + se_B^4 / (n_B - 1))
    within noise  <=>  t <= t_0.975(df)

Across repeats a figure carries its 95 % confidence interval instead of ``se``;
that interval is ``t_0.975(n - 1) x se``, so ``se = ci95 / t_0.975(n - 1)``
(with n = 2 the interval is 12.7 standard errors, not two). The t quantile of a
fractional ``df`` is read at the whole ``df`` below it: a slightly wider
threshold, never a narrower one.

Before the test, :func:`verdict` refuses to answer where no test could: two lower
bounds (percentiles with failures beyond them, ``censored``), a lower bound below
the other side's value, and a single run measured on a contended machine (its
per-second spread says nothing of how far the next run would land).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# two-sided 95 % Student t quantiles by degrees of freedom; beyond 30 the normal's 1.96 is close
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip

RULE = (
    "within noise: Welch's t-test at 5 %, t = |B - A| / sqrt(se_A^2 + se_B^2) <= t_0.975(df), "
    "df by Welch-Satterthwaite; se = per-second stdev / sqrt(seconds) for one step, the "
    "repeats' stdev / sqrt(repeats) across repeats; noise unknown: a side has no spread "
    "stored; unknown (lower bounds): a percentile with failures beyond it is only a lower "
    "bound, and two of them, or one below the other side, cannot differ significantly; "
    "unknown (contended): one run on a side, measured while the machine was contended"
)

#: what :func:`verdict` answers besides a significant difference ("")
WITHIN = "within noise"
NOISE_UNKNOWN = "noise unknown"
LOWER_BOUNDS = "unknown (lower bounds)"
CONTENDED = "unknown (contended)"


def t95(df: float) -> float:
    """The two-sided 95 % Student t quantile at ``df`` degrees of freedom (floored)."""
    k = max(1, math.floor(df + 1e-9))  # a df of 2 computed as 1.9999... is 2
    return _T95[k - 1] if k <= len(_T95) else 1.96


def se_from_ci95(ci95: float, n: int) -> float | None:
    """The standard error behind a 95 % interval of a mean over ``n`` samples."""
    if n < 2:
        return None
    return ci95 / t95(n - 1)


def within(a: float, se_a: float, n_a: int, b: float, se_b: float, n_b: int) -> bool:
    """True when Welch's t-test cannot tell ``a`` from ``b`` at the 5 % level."""
    var = se_a**2 + se_b**2
    if var == 0.0:
        return a == b  # no spread at all: only equal values are the same
    t = abs(b - a) / math.sqrt(var)
    parts = [(se**2) ** 2 / (n - 1) for se, n in ((se_a, n_a), (se_b, n_b)) if n > 1 and se]
    df = var**2 / sum(parts) if parts else 1.0
    return t <= t95(df)


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a comparison: a mean, its standard error over ``n`` samples, and what
    limits it."""

    value: float
    se: float | None = None
    n: int = 0
    runs: int = 1  # independent runs behind the figure: 1, or its repeats
    censored: bool = False  # a lower bound: failures lie beyond this percentile
    contended: bool = False  # a run of it was measured on a contended machine

    @classmethod
    def of_runs(
        cls, values: Sequence[float], censored: bool = False, contended: bool = False
    ) -> Side:
        """A figure over independent runs (a cell's repeats): their mean, and the standard
        error of that mean from their run-to-run spread."""
        n = len(values)
        se = statistics.stdev(values) / math.sqrt(n) if n > 1 else None
        return cls(statistics.fmean(values), se, n, n, censored, contended)


def verdict(a: Side, b: Side) -> str:
    """ "" when B differs from A beyond the noise; else why not (:data:`WITHIN`) or why
    no test can tell (:data:`LOWER_BOUNDS`, :data:`CONTENDED`, :data:`NOISE_UNKNOWN`)."""
    if a.censored and b.censored:
        return LOWER_BOUNDS
    for bound, other in ((a, b), (b, a)):
        # the true value lies at or above the bound: as high as the other side, or higher
        if bound.censored and other.value >= bound.value:
            return LOWER_BOUNDS
    if any(s.runs < 2 and s.contended for s in (a, b)):
        return CONTENDED
    if a.se is None or b.se is None:
        return NOISE_UNKNOWN
    return WITHIN if within(a.value, a.se, a.n, b.value, b.se, b.n) else ""
