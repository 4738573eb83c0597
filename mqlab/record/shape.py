"""What a value in a results file may be: the vocabulary every record field declares.

A field of a record type (:mod:`mqlab.record.step` and its sections) names its shape
here: a whole number in a range, a finite number, bounded text, a list or map of
bounded size, a stored histogram. :func:`check` walks a parsed document against such
a shape and raises :class:`ShapeProblem` naming the field path
(``steps[3].latency_ms.p50``) and what was expected. The checks cost one walk: a file
at the limits a run can produce (10,000 steps) is checked in about a second.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from mqlab import bounds as limits
from mqlab.measure import latency

#: steps and aggregates of one run (a run has at most limits.MAX_STEPS)
MAX_STEPS: Final = limits.MAX_STEPS
#: a message count: 2**53 keeps every count exact as a JSON number (a day at 10M msg/s is 8.6e11)
MAX_COUNT: Final = 2**53
#: per-second entries of a step's series: warm-up and window (a day each) and the longest drain
MAX_SECONDS: Final = int(2 * limits.MAX_DURATION_S + limits.MAX_WAIT_S) + 10
#: latency in ms: the histograms' top (1 h), with HdrHistogram's rounding above it
MAX_LATENCY_MS: Final = 2 * latency.HIGHEST_US / 1000.0
#: msg/s: far above what any machine measures, small enough for every ratio to stay finite
MAX_RATE: Final = 1e12
#: CPU in % of one core (a machine of 10,000 cores)
MAX_CPU_PERCENT: Final = 1e6
#: text fields: names are at most 64 characters, messages 200; free text in the
#: profile and environment (paths, CPU model, commands) stays below this
MAX_TEXT: Final = 4096
#: entries of a map or list that is not per step or per second (errors, workers, nodes, ...)
MAX_ENTRIES: Final = 10_000
#: a stored histogram: base64 text, and what its payload inflates to. A histogram of mqlab's
#: range (1 us .. 1 h, 3 digits) has at most COUNTS_LEN counters of at most 9 bytes each
MAX_HISTOGRAM_CHARS: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Int:
    lo: int
    hi: int
    null: bool = False


@dataclass(frozen=True, slots=True)
class Num:
    """A finite number (an integer too) in lo .. hi."""

    lo: float
    hi: float
    null: bool = False


@dataclass(frozen=True, slots=True)
class Text:
    max: int = MAX_TEXT
    null: bool = False
    choices: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class Bool:
    null: bool = False


@dataclass(frozen=True, slots=True)
class Seq:
    item: Spec
    max: int = MAX_ENTRIES
    null: bool = False


@dataclass(frozen=True, slots=True)
class Table:
    """A JSON object whose keys are names (error kinds, plugins, nodes) and values alike."""

    value: Spec
    max: int = MAX_ENTRIES
    null: bool = False


@dataclass(frozen=True, slots=True)
class Record:
    """A JSON object with known fields: each checked when present, ``required`` ones always."""

    fields: Mapping[str, Spec]
    required: tuple[str, ...] = ()
    null: bool = False
    #: at least one of these is present and not null (a step's load: concurrency or rate)
    one_of: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Either:
    """The first of two shapes that fits."""

    first: Spec
    second: Spec
    null: bool = False


@dataclass(frozen=True, slots=True)
class Histogram:
    """An HdrHistogram in its standard base64 compressed form (values in µs), or ""."""

    null: bool = False


@dataclass(frozen=True, slots=True)
class Free:
    """Any JSON (free text of the profile, the environment): strings, entries bounded."""

    null: bool = True


Spec = Int | Num | Text | Bool | Seq | Table | Record | Either | Histogram | Free

FREE = Free()
COUNT = Int(0, MAX_COUNT)
SECONDS = Num(-limits.MAX_DURATION_S - limits.MAX_WAIT_S, 2 * limits.MAX_DURATION_S)
MS = Num(0.0, MAX_LATENCY_MS)
RATE = Num(0.0, MAX_RATE)
CPU = Num(0.0, MAX_CPU_PERCENT)
PERCENT = Num(0.0, 100.0)
MB = Num(0.0, 1e9)
NAME = Text(200)
WORDS = Text(MAX_TEXT)
PATTERN = Text(choices=frozenset({"call", "cast", "notify"}))


class Huge:
    """A JSON number no results file holds: kept by the parser, refused by the check."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        if len(self.text) > 24:
            return f"a number of {len(self.text):,} characters"
        return self.text


class ShapeProblem(Exception):
    """A value that does not fit its shape: where (the field path) and what is wrong."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


def shown(value: Any) -> str:
    """A value as a refusal names it: short, never the whole of a big object."""
    if isinstance(value, Huge):
        return repr(value)
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 40 else text[:37] + "..."


def _limit(v: float) -> str:
    return f"{v:,}" if isinstance(v, int) or not v.is_integer() else f"{int(v):,}"


def _what(spec: Spec) -> str:
    if isinstance(spec, Int):
        what = f"a whole number {_limit(spec.lo)} .. {_limit(spec.hi)}"
    elif isinstance(spec, Num):
        what = f"a finite number {_limit(spec.lo)} .. {_limit(spec.hi)}"
    elif isinstance(spec, Text):
        what = (
            "one of " + ", ".join(sorted(spec.choices))
            if spec.choices
            else f"text of at most {spec.max:,} characters"
        )
    elif isinstance(spec, Bool):
        what = "true or false"
    elif isinstance(spec, Seq):
        what = f"a list of at most {spec.max:,} entries"
    elif isinstance(spec, Table | Record):
        what = "an object"
    elif isinstance(spec, Either):
        return f"{_what(spec.first)} or {_what(spec.second)}"
    elif isinstance(spec, Histogram):
        what = "a base64 HdrHistogram"
    else:
        what = "JSON"
    return what + (" or null" if spec.null and not isinstance(spec, Free) else "")


def _expected(spec: Spec, value: Any, where: str) -> ShapeProblem:
    return ShapeProblem(where, f"expected {_what(spec)}, got {shown(value)}")


def check(spec: Spec, value: Any, where: str) -> None:
    """Raise :class:`ShapeProblem` naming the field path if ``value`` does not fit ``spec``."""
    if value is None:
        if spec.null:
            return
        raise _expected(spec, value, where)
    if isinstance(spec, Int):
        if type(value) is not int or not spec.lo <= value <= spec.hi:
            raise _expected(spec, value, where)
    elif isinstance(spec, Num):
        ok = type(value) in (int, float) and spec.lo <= value <= spec.hi
        if not ok:  # NaN fails the comparison; infinities and huge numbers are Huge
            raise _expected(spec, value, where)
    elif isinstance(spec, Text):
        if type(value) is not str or len(value) > spec.max:
            raise _expected(spec, value, where)
        if spec.choices is not None and value not in spec.choices:
            raise _expected(spec, value, where)
    elif isinstance(spec, Bool):
        if type(value) is not bool:
            raise _expected(spec, value, where)
    elif isinstance(spec, Seq):
        _seq(spec, value, where)
    elif isinstance(spec, Table):
        if type(value) is not dict or len(value) > spec.max:
            raise _expected(spec, value, where)
        for k, v in value.items():
            if len(k) > 200:
                raise ShapeProblem(where, f"a key of {len(k):,} characters (at most 200)")
            check(spec.value, v, f"{where}.{k}")
    elif isinstance(spec, Record):
        _record(spec, value, where)
    elif isinstance(spec, Either):
        try:
            check(spec.first, value, where)
        except ShapeProblem:
            try:
                check(spec.second, value, where)
            except ShapeProblem:
                raise _expected(spec, value, where) from None
    elif isinstance(spec, Histogram):
        if type(value) is not str:
            raise _expected(spec, value, where)
        if value:
            problem = histogram_problem(value)
            if problem:
                raise ShapeProblem(where, problem)
    else:
        _free(value, where, [0])


def _seq(spec: Seq, value: Any, where: str) -> None:
    if type(value) is not list or len(value) > spec.max:
        raise _expected(spec, value, where)
    item = spec.item
    if isinstance(item, Num | Int) and not item.null:
        _numbers(item, value, where)
        return
    for i, v in enumerate(value):
        if v is None and item.null:
            continue
        check(item, v, f"{where}[{i}]")


def _record(spec: Record, value: Any, where: str) -> None:
    if type(value) is not dict:
        raise _expected(spec, value, where)
    for key in spec.required:
        if key not in value:
            raise ShapeProblem(f"{where}.{key}", "missing")
    for key, v in value.items():
        sub = spec.fields.get(key)
        check(sub if sub is not None else FREE, v, f"{where}.{key}")
    if spec.one_of and all(value.get(k) is None for k in spec.one_of):
        raise ShapeProblem(where, f"expected {' or '.join(spec.one_of)}, got neither")


def _numbers(spec: Num | Int, values: list[Any], where: str) -> None:
    """A long series of numbers, checked in one pass (the common case of a per-second list)."""
    lo, hi = spec.lo, spec.hi
    kinds = (int,) if isinstance(spec, Int) else (int, float)
    for i, v in enumerate(values):
        if v is None or type(v) not in kinds or not lo <= v <= hi:
            check(spec, v, f"{where}[{i}]")


def _free(value: Any, where: str, seen: list[int]) -> None:
    """Free JSON: every string bounded, every number finite and of a sane size."""
    seen[0] += 1
    if seen[0] > MAX_ENTRIES * 10:
        raise ShapeProblem(where, "more entries than a results file holds")
    if isinstance(value, Huge):
        raise ShapeProblem(where, f"expected a number a run writes, got {value!r}")
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise ShapeProblem(where, f"text of {len(value):,} characters (at most {MAX_TEXT:,})")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _free(v, f"{where}[{i}]", seen)
    elif isinstance(value, dict):
        for k, v in value.items():
            _free(k, where, seen)
            _free(v, f"{where}.{k}", seen)


# -- a stored histogram -----------------------------------------------------------

_EXT = struct.Struct(">II")  # cookie, length of the compressed payload
_PAYLOAD = struct.Struct(">IIIIQQd")  # cookie, payload_len, offset, digits, lowest, highest, ratio
_COMPRESSION_COOKIE_BASE = 0x1C849304
_ENCODING_COOKIE_BASE = 0x1C849303
#: counters of the widest histogram mqlab writes (1 us .. 1 h at 3 digits), 9 bytes each at most
_MAX_INFLATED = _PAYLOAD.size + 9 * latency.new_histogram().counts_len


def histogram_problem(text: str) -> str | None:
    """Why a stored histogram is not one mqlab wrote, checked without inflating it past
    what such a histogram can hold; None when it is fine."""
    if len(text) > MAX_HISTOGRAM_CHARS:
        return f"a histogram of {len(text):,} characters (at most {MAX_HISTOGRAM_CHARS:,})"
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return "a histogram that is not base64"
    if len(raw) < _EXT.size:
        return "a histogram too short to hold one"
    cookie, length = _EXT.unpack_from(raw)
    if cookie & ~0xF0 != _COMPRESSION_COOKIE_BASE or length != len(raw) - _EXT.size:
        return "not an HdrHistogram (wrong header)"
    inflate = zlib.decompressobj()
    try:
        data = inflate.decompress(raw[_EXT.size :], _MAX_INFLATED)
    except zlib.error:
        return "a histogram whose payload is not zlib data"
    if inflate.unconsumed_tail or not inflate.eof:
        return f"a histogram that inflates past {_MAX_INFLATED:,} bytes (or is cut short)"
    if len(data) < _PAYLOAD.size:
        return "a histogram too short to hold one"
    cookie, payload_len, offset, digits, lowest, highest, _ = _PAYLOAD.unpack_from(data)
    settings = (offset, lowest, highest) == (0, latency.LOWEST_US, latency.HIGHEST_US)
    if cookie & ~0xF0 != _ENCODING_COOKIE_BASE or not settings or digits not in (2, 3):
        return "a histogram with settings mqlab never writes (1 us .. 1 h, 2 or 3 digits)"
    if payload_len != len(data) - _PAYLOAD.size:
        return "a histogram whose payload length does not match"
    return None
