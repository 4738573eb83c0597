"""The one reader of a results file: strict, total and bounded.

``show``, ``report`` and ``compare`` read a results file through :func:`read`,
which parses it and checks every field they use against one declared shape
(:data:`DOCUMENT`) before any figure is formatted: its type, its range, finite
numbers only, bounded sizes, and a stored histogram that is base64, inflates to
at most what a histogram of mqlab's range can hold and carries mqlab's own
settings. Anything else is one :class:`ResultsShapeError` naming the field path
(``steps[3].latency_ms.p50``). A key the shape does not know is kept and never
shown; a key it knows but that is absent means "not measured". What the readers
accept is stated in docs/results.md.

The checks cost one walk over the parsed document: a file at the limits a run
can produce (10,000 steps) is read in about a second.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from mqlab.config import limits
from mqlab.measure import latency
from mqlab.results.record import Run, run_from
from mqlab.results.store import SCHEMA
from mqlab.terminal import printable_doc

#: the schemas the readers read: this mqlab's, and 1 (before histograms were stored)
SCHEMAS: Final = (1, SCHEMA)
#: the readers read no further: a results file of 10,000 steps with their series is far smaller
MAX_RESULTS_BYTES: Final = 64 * 1024 * 1024
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
#: JSON integers with more digits are not a figure mqlab wrote (and would not convert)
MAX_INT_DIGITS: Final = 20


class ResultsShapeError(ValueError):
    """A file that is not an mqlab results document this mqlab reads; the message is one line."""


# -- what a value may be ------------------------------------------------------------


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
class Flag:
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
    """The first of two shapes that fits (an aggregate's latency: a number or {mean, ci95})."""

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


Spec = Int | Num | Text | Flag | Seq | Table | Record | Either | Histogram | Free


FREE = Free()


def _record(required: str = "", null: bool = False, **fields: Spec) -> Record:
    return Record(fields, tuple(required.split()), null)


COUNT = Int(0, MAX_COUNT)
COUNT_OR_NULL = Int(0, MAX_COUNT, null=True)
SECONDS = Num(-limits.MAX_DURATION_S - limits.MAX_WAIT_S, 2 * limits.MAX_DURATION_S)
SECONDS_OR_NULL = Num(SECONDS.lo, SECONDS.hi, null=True)
MS = Num(0.0, MAX_LATENCY_MS, null=True)
RATE = Num(0.0, MAX_RATE, null=True)
CPU = Num(0.0, MAX_CPU_PERCENT, null=True)
NAME = Text(200)
WORDS = Text(MAX_TEXT, null=True)
PATTERN = Text(choices=frozenset({"call", "cast", "notify"}))

LATENCY = _record(
    "",
    kind=Text(20, null=True),
    p50=MS, p90=MS, p99=MS, p999=MS, max=MS,
    count=COUNT_OR_NULL, failed=COUNT_OR_NULL,
    failed_percent=Num(0.0, 100.0, null=True),
    censored=Seq(Text(10), 10),
)  # fmt: skip
THROUGHPUT = _record(
    "",
    mean=RATE, stdev=RATE, ci95=RATE,
    seconds=Int(0, MAX_SECONDS, null=True), n=Int(0, MAX_STEPS, null=True),
)  # fmt: skip
SERIES_VALUES = Seq(Num(0.0, MAX_COUNT, null=True), MAX_SECONDS)
SERIES = _record(
    null=True,
    t0_offset_s=SECONDS,
    sent=SERIES_VALUES, received=SERIES_VALUES, round_trip=SERIES_VALUES,
    errors=SERIES_VALUES, p50_ms=Seq(MS, MAX_SECONDS), p99_ms=Seq(MS, MAX_SECONDS),
)  # fmt: skip
FLAG = _record("code", code=NAME, message=WORDS)
#: a role's processes' times over the window (real, user and sys seconds)
_SECONDS_SPENT = Num(0.0, 1e9)
_TIMES = _record(
    "real_s user_s sys_s", null=True,
    real_s=_SECONDS_SPENT, user_s=_SECONDS_SPENT, sys_s=_SECONDS_SPENT,
)  # fmt: skip
CPU_RECORD = _record(
    clients_percent=CPU, servers_percent=CPU, broker_percent=CPU,
    broker_process=_record(pid=Int(0, 2**31, null=True), name=WORDS, null=True),
    samples=Int(0, MAX_SECONDS, null=True),
    clients_times=_TIMES,
    servers_times=_TIMES,
    workers=Seq(_record(
        worker=NAME, role=NAME, cpu_percent=CPU, peak_rss_mb=Num(0.0, 1e9, null=True),
    )),
    proxies=Seq(_record(proxy=NAME, upstream=NAME, cpu_percent=CPU)),
    nodes=Seq(_record(
        "node cpu_percent",
        node=NAME, name=WORDS, cpu_percent=CPU, sys_percent=CPU,
        rss_mb=Num(0.0, 1e9, null=True),
        series=Table(Seq(CPU, MAX_SECONDS), 10), t0_offset_s=SECONDS,
    ), 64),
    null=True,
)  # fmt: skip
EVENT = _record(
    t_s=SECONDS, action=NAME, detail=WORDS, kind=Text(20, null=True),
    planned_s=SECONDS_OR_NULL, took_s=SECONDS_OR_NULL, ok=Flag(null=True),
    gap_s=SECONDS_OR_NULL,
)  # fmt: skip
PHASE = _record(
    "name start_s end_s",
    name=NAME, start_s=SECONDS, end_s=SECONDS, throughput=RATE, p50_ms=MS, p99_ms=MS,
    errors=COUNT_OR_NULL, sent=COUNT_OR_NULL, completed=COUNT_OR_NULL,
    seconds=Int(0, MAX_SECONDS, null=True), servers_cpu_percent=CPU,
    dual_listening=Int(0, MAX_COUNT, null=True),
)  # fmt: skip
FAULT = _record(
    "event t_s detect_s detected_by recover_s errors lost duplicates timed_out verdict",
    event=NAME, t_s=SECONDS, median_before=RATE, detect_s=SECONDS_OR_NULL,
    detected_by=Text(40, null=True), recover_s=SECONDS_OR_NULL, errors=COUNT,
    lost=COUNT_OR_NULL, duplicates=COUNT_OR_NULL, timed_out=COUNT_OR_NULL,
    promise=WORDS, verdict=Text(40),
    outage_s=Num(0.0, 2 * limits.MAX_DURATION_S, null=True), fails_by=Text(40, null=True),
)  # fmt: skip
#: link faults still in force when a drain ended, and what they held (the step's and its
#: background's)
HELD = _record(
    "by", null=True, by=Seq(NAME, 100), messages=COUNT_OR_NULL, proxy_bytes=COUNT_OR_NULL
)
BACKGROUND = _record(
    "pattern rate achieved_rate sent received lost unaccounted duplicates throughput "
    "latency_ms flags",
    null=True,
    pattern=PATTERN, rate=RATE, achieved_rate=RATE, kept_up=Flag(null=True),
    sent=COUNT_OR_NULL, expected=COUNT_OR_NULL, received=COUNT_OR_NULL,
    lost=COUNT_OR_NULL, unaccounted=COUNT_OR_NULL, still_queued=COUNT_OR_NULL,
    duplicates=COUNT_OR_NULL, errors=Either(COUNT, Table(COUNT), null=True),
    throughput=THROUGHPUT, latency_ms=LATENCY, drain_end=Text(20, null=True), held=HELD,
    workers_lost=Seq(NAME), flags=Seq(Either(NAME, FLAG)),
    cpu=_record(clients_percent=CPU, servers_percent=CPU, null=True),
)  # fmt: skip
PERFTEST = _record(
    null=True,
    version=WORDS,
    rate=RATE,
    percent=Num(0.0, 1e9, null=True),
    command=WORDS,
    missing=WORDS,
)
CEILING = _record(
    "size library mode",
    null=True,
    size=Int(0, limits.MAX_MESSAGE_BYTES), library=Text(200, null=True),
    mode=Text(200, null=True), rate=RATE, sent_rate=RATE, percent=Num(0.0, 1e9, null=True),
    error=WORDS, confirms=WORDS, perftest=PERFTEST,
)  # fmt: skip
ERRORS = Table(COUNT, 1000)

STEP_FIELDS = _record(
    "step driver scenario pattern throughput latency_ms",
    step=Int(0, MAX_STEPS - 1), driver=NAME, plugin=NAME, scenario=NAME, pattern=PATTERN,
    concurrency=Int(1, 10**9, null=True), rate=Num(0.0, limits.MAX_RATE, null=True),
    repeat=Int(0, limits.MAX_REPEAT - 1),
    servers=Int(0, limits.MAX_SERVERS * limits.MAX_SERVERS),
    targets=Int(0, limits.MAX_SHARED_TARGETS),
    groups=Int(0, MAX_ENTRIES), serializer=Text(40), envelope=Flag(), message_size=Free(),
    durable=Flag(), queue_type=Text(40), timeout_s=Num(0.0, limits.MAX_WAIT_S),
    status=Text(40), workers_lost=Seq(NAME),
    sent=COUNT, expected=COUNT_OR_NULL, received=COUNT, round_trip=COUNT, lost=COUNT,
    unaccounted=COUNT_OR_NULL, still_queued=COUNT_OR_NULL, drain_s=Num(0.0, 1e6, null=True),
    depth_unknown=Flag(null=True), settings=Table(FREE, null=True),
    held=HELD,
    drain_end=Text(20, null=True), duplicates=COUNT, out_of_order=COUNT_OR_NULL,
    errors=ERRORS, error_messages=Table(WORDS, 1000),
    throughput=THROUGHPUT, latency_ms=LATENCY,
    latency=Table(LATENCY, 2),
    histograms=Table(Histogram(), 2),
    open_loop=_record(
        intended=COUNT, sent=COUNT, not_sent=COUNT, achieved_rate=RATE,
        max_behind_ms=Num(0.0, 1e12, null=True), kept_up=Flag(), null=True,
    ),
    flags=Seq(FLAG, 100),
    cpu=CPU_RECORD,
    series=SERIES,
    ceiling=CEILING,
    roles=Table(NAME, 2, null=True),
    events=Seq(EVENT, 1000), phases=Seq(PHASE, 1000), faults=Seq(FAULT, 1000),
    background=BACKGROUND,
    update=_record(verdict=WORDS, null=True),
    placement=Free(), queues=Free(), connections=Free(), error=WORDS,
)  # fmt: skip
AGGREGATE_FIELDS = _record(
    "driver scenario pattern throughput latency_ms",
    driver=NAME, scenario=NAME, pattern=PATTERN,
    concurrency=Int(1, 10**9, null=True), rate=Num(0.0, limits.MAX_RATE, null=True),
    message_size=Free(), serializer=Text(40, null=True),
    plugin=Text(200, null=True), envelope=Flag(null=True), durable=Flag(null=True),
    queue_type=Text(40, null=True), servers=Int(0, limits.MAX_SERVERS**2, null=True),
    targets=Int(0, limits.MAX_SHARED_TARGETS, null=True), groups=Int(0, MAX_ENTRIES, null=True),
    timeout_s=Num(0.0, limits.MAX_WAIT_S, null=True), roles=Table(NAME, 2, null=True),
    settings=Table(FREE, null=True),
    repeats=Int(0, limits.MAX_REPEAT), steps=Seq(Int(0, MAX_STEPS - 1), MAX_STEPS),
    throughput=THROUGHPUT,
    latency_ms=LATENCY,
    sent=COUNT_OR_NULL, lost=COUNT, unaccounted=COUNT_OR_NULL, duplicates=COUNT,
    errors=Either(COUNT, ERRORS), flags=Seq(Either(NAME, FLAG), 100),
)  # fmt: skip
#: a load level is a concurrency (closed loop) or a rate (open loop)
STEP = Record(STEP_FIELDS.fields, STEP_FIELDS.required, one_of=("concurrency", "rate"))
AGGREGATE = Record(
    AGGREGATE_FIELDS.fields, AGGREGATE_FIELDS.required, one_of=("concurrency", "rate")
)
ENVIRONMENT = _record(
    plugins=Table(_record("package version", package=NAME, version=NAME), 100),
    libraries=Table(FREE, 1000, null=True),
    codec_cost_us=Table(FREE, 1000, null=True),
    broker=Table(Free(), 100, null=True),
    cpu_count=Int(0, 1_000_000, null=True),
    memory_gb=Num(0.0, 1e9, null=True),
)  # fmt: skip
PROFILE = _record(
    run=_record(
        name=Text(200), duration=Num(0.0, limits.MAX_DURATION_S, null=True),
        warmup=Num(0.0, limits.MAX_DURATION_S, null=True), repeat=Int(1, limits.MAX_REPEAT),
        drain=Num(0.0, limits.MAX_WAIT_S, null=True),
    ),
    broker=_record(urls=Seq(Text(2048), limits.MAX_SERVERS)),
)  # fmt: skip
DOCUMENT = _record(
    "schema status profile environment steps",
    schema=Int(1, SCHEMA),
    status=Text(40),
    message=WORDS,
    profile=PROFILE,
    environment=ENVIRONMENT,
    steps=Seq(STEP, MAX_STEPS),
    aggregates=Seq(AGGREGATE, MAX_STEPS),
)  # fmt: skip


# -- checking a value against its shape ----------------------------------------------


class _Huge:
    """A JSON number no results file holds: kept by the parser, refused by the check."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        if len(self.text) > 24:
            return f"a number of {len(self.text):,} characters"
        return self.text


def _int(text: str) -> int | _Huge:
    return int(text) if len(text) <= MAX_INT_DIGITS else _Huge(text)


def _float(text: str) -> float | _Huge:
    value = float(text)
    return value if math.isfinite(value) else _Huge(text)


def _no_constant(name: str) -> Any:
    raise ResultsShapeError(f"not strict JSON ({name})")


def _shown(value: Any) -> str:
    if isinstance(value, _Huge):
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
    elif isinstance(spec, Flag):
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


class _Bad(Exception):
    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


def _expected(spec: Spec, value: Any, where: str) -> _Bad:
    return _Bad(where, f"expected {_what(spec)}, got {_shown(value)}")


def check(spec: Spec, value: Any, where: str) -> None:
    """Raise :class:`_Bad` naming the field path if ``value`` does not fit ``spec``."""
    if value is None:
        if spec.null:
            return
        raise _expected(spec, value, where)
    if isinstance(spec, Int):
        if type(value) is not int or not spec.lo <= value <= spec.hi:
            raise _expected(spec, value, where)
    elif isinstance(spec, Num):
        ok = type(value) in (int, float) and spec.lo <= value <= spec.hi
        if not ok:  # NaN fails the comparison; infinities and huge numbers are _Huge
            raise _expected(spec, value, where)
    elif isinstance(spec, Text):
        if type(value) is not str or len(value) > spec.max:
            raise _expected(spec, value, where)
        if spec.choices is not None and value not in spec.choices:
            raise _expected(spec, value, where)
    elif isinstance(spec, Flag):
        if type(value) is not bool:
            raise _expected(spec, value, where)
    elif isinstance(spec, Seq):
        if type(value) is not list or len(value) > spec.max:
            raise _expected(spec, value, where)
        item = spec.item
        if isinstance(item, Num) and not item.null:
            _numbers(item, value, where)
            return
        for i, v in enumerate(value):
            if v is None and item.null:
                continue
            check(item, v, f"{where}[{i}]")
    elif isinstance(spec, Table):
        if type(value) is not dict or len(value) > spec.max:
            raise _expected(spec, value, where)
        for k, v in value.items():
            if len(k) > 200:
                raise _Bad(where, f"a key of {len(k):,} characters (at most 200)")
            check(spec.value, v, f"{where}.{k}")
    elif isinstance(spec, Record):
        if type(value) is not dict:
            raise _expected(spec, value, where)
        for key in spec.required:
            if key not in value:
                raise _Bad(f"{where}.{key}", "missing")
        for key, v in value.items():
            sub = spec.fields.get(key)
            check(sub if sub is not None else FREE, v, f"{where}.{key}")
        if spec.one_of and all(value.get(k) is None for k in spec.one_of):
            raise _Bad(where, f"expected {' or '.join(spec.one_of)}, got neither")
    elif isinstance(spec, Either):
        try:
            check(spec.first, value, where)
        except _Bad:
            try:
                check(spec.second, value, where)
            except _Bad:
                raise _expected(spec, value, where) from None
    elif isinstance(spec, Histogram):
        if type(value) is not str:
            raise _expected(spec, value, where)
        if value:
            problem = histogram_problem(value)
            if problem:
                raise _Bad(where, problem)
    else:
        _free(value, where, [0])


def _numbers(spec: Num, values: list[Any], where: str) -> None:
    """A long series of numbers, checked in one pass (the common case of a per-second list)."""
    lo, hi = spec.lo, spec.hi
    for i, v in enumerate(values):
        if v is None or type(v) not in (int, float) or not lo <= v <= hi:
            check(spec, v, f"{where}[{i}]")


def _free(value: Any, where: str, seen: list[int]) -> None:
    """Free JSON: every string bounded, every number finite and of a sane size."""
    seen[0] += 1
    if seen[0] > MAX_ENTRIES * 10:
        raise _Bad(where, "more entries than a results file holds")
    if isinstance(value, _Huge):
        raise _Bad(where, f"expected a number a run writes, got {value!r}")
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise _Bad(where, f"text of {len(value):,} characters (at most {MAX_TEXT:,})")
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


# -- the file -------------------------------------------------------------------------


def read_bounded(path: str | Path) -> bytes:
    """A results file's bytes; ResultsShapeError if larger than MAX_RESULTS_BYTES."""
    with open(path, "rb") as f:
        raw = f.read(MAX_RESULTS_BYTES + 1)
    if len(raw) > MAX_RESULTS_BYTES:
        raise ResultsShapeError(f"larger than {MAX_RESULTS_BYTES:,} bytes: not a results file")
    return raw


def parse(raw: bytes) -> Any:
    """Strict JSON: no NaN or Infinity; a number no run writes is kept aside for the check."""
    try:
        return json.loads(raw, parse_constant=_no_constant, parse_int=_int, parse_float=_float)
    except RecursionError:
        raise ResultsShapeError("nested too deeply to be a results file") from None
    except UnicodeDecodeError:
        raise ResultsShapeError("not a UTF-8 text file") from None
    except json.JSONDecodeError as exc:
        raise ResultsShapeError(
            f"not JSON ({exc.msg} at line {exc.lineno}): give a results file written by `mqlab run`"
        ) from None


def validate(doc: Any) -> dict[str, Any]:
    """The document, checked against :data:`DOCUMENT`; ResultsShapeError names the field."""
    if not isinstance(doc, dict):
        raise ResultsShapeError("not a results file (expected a JSON object)")
    if "schema" not in doc or not isinstance(doc.get("steps"), list):
        raise ResultsShapeError(
            "not an mqlab results file (no schema and steps): give a file written by `mqlab run`"
        )
    schema = doc.get("schema")
    if type(schema) is not int or schema not in SCHEMAS:
        raise ResultsShapeError(
            f"results schema {_shown(schema)} is not one this mqlab reads "
            f"({', '.join(map(str, SCHEMAS))}): use the mqlab version that wrote it"
        )
    try:
        check(DOCUMENT, doc, "")
    except _Bad as exc:
        where = exc.where.removeprefix(".")
        raise ResultsShapeError(f"{where}: {exc.problem}") from None
    return doc


def load(path: str | Path) -> dict[str, Any]:
    """Read, parse and check a results file; ResultsShapeError (one line) if it is not one."""
    return validate(parse(read_bounded(path)))


class ResultsError(ValueError):
    """The file cannot be read as an mqlab results file; one line naming the file (and the
    field)."""


def load_run(path: str | Path) -> Run:
    """Read a results file into typed values; :class:`ResultsError` (one line) if it is not one
    this mqlab reads. Every name in it is made printable: shown as text, never interpreted."""
    p = Path(path)
    try:
        doc = load(p)
    except FileNotFoundError:
        raise ResultsError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise ResultsError(f"{p}: is a directory, not a results file") from None
    except OSError as exc:
        raise ResultsError(f"{p}: cannot read it: {exc.strerror or exc}") from None
    except ResultsShapeError as exc:
        raise ResultsError(f"{p}: cannot read the results file: {exc}") from None
    return run_from(p, printable_doc(doc))
