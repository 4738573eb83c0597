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
"""

from __future__ import annotations

import math

# two-sided 95 % Student t quantiles by degrees of freedom; beyond 30 the normal's 1.96 is close
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip

RULE = (
    "within noise: Welch's t-test at 5 %, t = |B - A| / sqrt(se_A^2 + se_B^2) <= t_0.975(df), "
    "df by Welch-Satterthwaite; se = per-second stdev / sqrt(seconds) for one step, "
    "ci95 / t_0.975(repeats - 1) across repeats; noise unknown: a side has no spread stored"
)


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
