"""Latency figures: HdrHistograms, and percentiles that never hide a failure.

Latencies are microseconds, 1 us to 1 h at 3 significant digits (the per-second
histograms keep 2). A value over the range is recorded at the range's top and
counted, never dropped. A message that did not complete inside the window (a
call that timed out or failed, a send that raised, a message the open-loop
generator could not send) has no latency, so it is counted as *failed* and sits
above every measured value: a percentile that falls inside the failed fraction
is only a lower bound, stored as the step's timeout (or the largest measured
value, when that is larger) and listed in ``censored``, and shown as ">= value".
A driver that times out 3 % of its calls therefore cannot show a better p99
than one that answers slowly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from hdrh.histogram import HdrHistogram

LOWEST_US, HIGHEST_US, DIGITS = 1, 3_600_000_000, 3
#: per-second histograms only feed p50/p99 per second: 2 digits keep them small
SECOND_DIGITS = 2
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p999", 99.9))
KINDS = ("round_trip", "one_way")


def new_histogram(digits: int = DIGITS) -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, digits)


def decode(encoded: str | bytes) -> HdrHistogram:
    return HdrHistogram.decode(encoded)


def encode(hist: HdrHistogram) -> str:
    """Base64 text (HdrHistogram's standard compressed form); empty when nothing was recorded."""
    if not hist.get_total_count():
        return ""
    raw = hist.encode()
    return raw.decode("ascii") if isinstance(raw, bytes) else str(raw)


def merge(encoded: Iterable[str | bytes], digits: int = DIGITS) -> HdrHistogram:
    total = new_histogram(digits)
    for e in encoded:
        if e:
            total.add(decode(e))
    return total


def bucket_shape(hist: HdrHistogram) -> tuple[int, int]:
    """``(mask, top)``: a value ``us``'s bucket starts at ``us >> s << s``, where
    ``s = (us | mask).bit_length() - top`` (hdrh's own indexing: bucket_index +
    unit_magnitude = pow2ceiling(value | mask) - (half magnitude + 1)). A bucket of
    a histogram with more digits lies inside one bucket of a histogram with fewer."""
    return hist.sub_bucket_mask, hist.sub_bucket_half_count_magnitude + 1


def record(hist: HdrHistogram, counts: Mapping[int, int]) -> int:
    """Add microsecond values with their counts; returns how many were over the range.

    hdrh's record_value costs microseconds in Python, so values are first merged
    into the histogram's own buckets (each to its bucket's lowest equivalent value,
    the way hdrh indexes it), and each bucket is recorded once. Nothing is lost:
    every figure hdrh gives (counts, percentiles, min and max as equivalent values,
    the encoded form) is the same as recording each value. A second's latencies
    hold thousands of distinct microsecond values but far fewer buckets.
    """
    over = 0
    mask, top = bucket_shape(hist)
    buckets: dict[int, int] = {}
    for us, count in counts.items():
        if us > HIGHEST_US:
            over += count
            us = HIGHEST_US
        elif us < LOWEST_US:
            us = LOWEST_US
        shift = (us | mask).bit_length() - top
        key = us >> shift << shift
        buckets[key] = buckets.get(key, 0) + count
    for us, count in buckets.items():
        hist.record_value(us, count)
    return over


def summary(hist: HdrHistogram | None, failed: int, kind: str, timeout_s: float) -> dict[str, Any]:
    """Percentiles in ms over measured + failed messages; censored keys are lower bounds."""
    n = hist.get_total_count() if hist is not None else 0
    total = n + failed
    out: dict[str, Any] = {"kind": kind}
    # a failure took at least the timeout, and longer than anything measured
    top_ms = hist.get_max_value() / 1000.0 if n and hist is not None else 0.0
    bound = round(max(timeout_s * 1000.0, top_ms), 3)
    censored: list[str] = []
    for key, p in PERCENTILES:
        if total == 0:
            out[key] = None
            continue
        rank = math.ceil(p / 100.0 * total)
        if rank > n:
            out[key] = bound
            censored.append(key)
            continue
        assert hist is not None
        value = hist.get_value_at_percentile(100.0 * rank / n)
        out[key] = round(value / 1000.0, 3)
        if value >= HIGHEST_US:
            censored.append(key)
    if total == 0:
        out["max"] = None
    elif failed:
        out["max"] = bound
        censored.append("max")
    else:
        assert hist is not None
        top = hist.get_max_value()
        out["max"] = round(top / 1000.0, 3)
        if top >= HIGHEST_US:
            censored.append("max")
    out["count"] = n
    out["failed"] = failed
    out["failed_percent"] = round(100.0 * failed / total, 3) if total else 0.0
    out["censored"] = censored
    return out
