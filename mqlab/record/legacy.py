"""Results files of schema 1 and 2 read into today's record types.

The keys are the same; what differs is what older runs wrote, and how:

- schema 1 has no histograms, flags, open-loop account, unaccounted or events, and its
  latency no kind or failures: those fields are None (not measured), never invented;
- a step's ``plugin`` was sometimes left out: it was then the driver's name;
- a step's ``throughput`` had no ``seconds``: the window's whole seconds are worked
  out from the run's duration (an interrupted step: the seconds its series has in it);
- an aggregate's (and a background's) ``errors`` could be a map of kinds and its
  ``flags`` whole flags: today each is a count and a list of codes;
- counts in a per-second series could be written as ``1000.0``.

:func:`normalise` rewrites only what it recognises, in place, before the document is
checked against the record types' shape for its schema (which requires only the keys
every schema had); anything else is left for that check to refuse.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["normalise"]

_SERIES_COUNTS = ("sent", "received", "round_trip", "errors")


def normalise(doc: dict[str, Any]) -> None:
    """An older document's steps and aggregates in today's form (see the module doc)."""
    run = doc.get("profile", {}).get("run", {}) if isinstance(doc.get("profile"), dict) else {}
    duration = run.get("duration") if isinstance(run, dict) else None
    for s in _dicts(doc.get("steps")):
        _step(s, duration if isinstance(duration, int | float) else None)
    for a in _dicts(doc.get("aggregates")):
        _cell(a)
        _counted(a)


def _dicts(v: Any) -> list[dict[str, Any]]:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def _cell(s: dict[str, Any]) -> None:
    if "plugin" not in s and isinstance(s.get("driver"), str):
        s["plugin"] = s["driver"]
    size = s.get("message_size")
    if size is not None and not isinstance(size, str):
        s["message_size"] = json.dumps(size)[:4096]


def _counted(d: dict[str, Any]) -> None:
    """``errors`` as one count, ``flags`` as their codes."""
    errors = d.get("errors")
    if isinstance(errors, dict) and all(_whole(v) for v in errors.values()):
        d["errors"] = sum(errors.values())
    flags = d.get("flags")
    if isinstance(flags, list):
        d["flags"] = [f["code"] if isinstance(f, dict) and "code" in f else f for f in flags]


def _whole(v: Any) -> bool:
    return type(v) is int or (type(v) is float and math.isfinite(v) and v.is_integer())


def _step(s: dict[str, Any], duration: float | None) -> None:
    _cell(s)
    if s.get("cpu", {}) is None:
        del s["cpu"]
    series = s.get("series")
    if isinstance(series, dict):
        for name in ("t0_offset_s", *_SERIES_COUNTS):
            v = series.get(name)
            if isinstance(v, float) and _whole(v):
                series[name] = int(v)
            elif isinstance(v, list) and all(_whole(x) for x in v):
                series[name] = [int(x) for x in v]
    thr = s.get("throughput")
    if isinstance(thr, dict) and "seconds" not in thr:
        thr["seconds"] = _seconds(s, duration)
    if isinstance(s.get("background"), dict):
        _counted(s["background"])


def _seconds(s: dict[str, Any], duration: float | None) -> int | None:
    """Whole seconds of the window the throughput covers (the n of its standard error)."""
    if duration is None or not math.isfinite(duration) or duration < 0:
        return None
    series = s.get("series")
    if s.get("status") == "done" or not isinstance(series, dict):
        return max(0, math.floor(duration))
    # an interrupted step: the whole seconds its series has inside the window
    t0 = series.get("t0_offset_s")
    if not isinstance(t0, int | float) or not math.isfinite(t0):
        return None
    n = max((len(c) for c in series.values() if isinstance(c, list)), default=0)
    return sum(1 for i in range(n) if 0 <= t0 + i <= duration - 1)
