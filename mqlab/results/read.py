"""The one reader of a results file: strict, total and bounded.

``show``, ``report``, ``compare`` and ``export`` read a results file through
:func:`load_run`, which parses it and checks every field against the shape its
record types declare (:mod:`mqlab.record.wire`: one declaration of every key, for
the writer and this reader alike) before any figure is formatted: its type, its
range, finite numbers only, bounded sizes, and a stored histogram that is base64,
inflates to at most what a histogram of mqlab's range can hold and carries mqlab's
own settings. Anything else is one :class:`ResultsShapeError` naming the field path
(``steps[3].latency_ms.p50``). A key the shape does not know is checked as free JSON
and never shown; a key it knows but that is absent means "not measured". Files of
schema 1 and 2 are read into the same types (:mod:`mqlab.record.legacy`). What the
readers accept is stated in docs/results.md.

The checks cost one walk over the parsed document: a file at the limits a run can
produce (10,000 steps) is read in about a second.
"""

from __future__ import annotations

import json
import math
import zlib
from functools import cache
from pathlib import Path
from typing import Any, Final

from mqlab import inputs
from mqlab.config import limits
from mqlab.record import legacy
from mqlab.record.shape import (
    FREE,
    MAX_STEPS,
    NAME,
    WORDS,
    Free,
    Huge,
    Int,
    Num,
    Record,
    Seq,
    ShapeProblem,
    Table,
    Text,
    check,
    shown,
)
from mqlab.record.step import Aggregate, StepRecord
from mqlab.record.trust import Fact
from mqlab.record.wire import SCHEMA, shape_of
from mqlab.results.record import Run, run_from
from mqlab.terminal import printable_doc

#: the schemas the readers read: 1 (before histograms), 2 (before the typed record), this one
SCHEMAS: Final = (1, 2, SCHEMA)
#: the readers read no further: a results file of 10,000 steps with their series is far smaller
MAX_RESULTS_BYTES: Final = 64 * 1024 * 1024
#: JSON integers with more digits are not a figure mqlab wrote (and would not convert)
MAX_INT_DIGITS: Final = 20


class ResultsShapeError(ValueError):
    """A file that is not an mqlab results document this mqlab reads; the message is one line."""


ENVIRONMENT = Record({
    "plugins": Table(Record({"package": NAME, "version": NAME}, ("package", "version")), 100),
    "libraries": Table(FREE, 1000, null=True),
    "codec_cost_us": Table(FREE, 1000, null=True),
    "broker": Table(Free(), 100, null=True),
    "cpu_count": Int(0, 1_000_000, null=True),
    "memory_gb": Num(0.0, 1e9, null=True),
    # the machine's facts as the run began (`mqlab system`); absent before issue 42
    "system": Seq(shape_of(Fact), 100, null=True),
})  # fmt: skip
PROFILE = Record({
    "run": Record({
        "name": Text(200), "duration": Num(0.0, limits.MAX_DURATION_S, null=True),
        "warmup": Num(0.0, limits.MAX_DURATION_S, null=True),
        "repeat": Int(1, limits.MAX_REPEAT), "drain": Num(0.0, limits.MAX_WAIT_S, null=True),
    }),
    "broker": Record({"urls": Seq(Text(2048), limits.MAX_SERVERS)}),
})  # fmt: skip


@cache
def document(schema: int = SCHEMA) -> Record:
    """The whole file's shape for ``schema``: its steps and aggregates as their types declare."""
    return Record(
        {
            "schema": Int(1, SCHEMA),
            "status": Text(40),
            "message": Text(WORDS.max, null=True),
            "profile": PROFILE,
            "environment": ENVIRONMENT,
            "steps": Seq(shape_of(StepRecord, schema), MAX_STEPS),
            "aggregates": Seq(shape_of(Aggregate, schema), MAX_STEPS),
        },
        ("schema", "status", "profile", "environment", "steps"),
    )


#: this schema's document: what the fuzz tests walk
DOCUMENT: Final = document()


# -- parsing ---------------------------------------------------------------------


def _int(text: str) -> int | Huge:
    return int(text) if len(text) <= MAX_INT_DIGITS else Huge(text)


def _float(text: str) -> float | Huge:
    value = float(text)
    return value if math.isfinite(value) else Huge(text)


def _no_constant(name: str) -> Any:
    raise ResultsShapeError(f"not strict JSON ({name})")


# -- the file -------------------------------------------------------------------------


def read_bounded(path: str | Path) -> bytes:
    """A results file's bytes, gzip-compressed or not (``docs/runs/*.json.gz``);
    ResultsShapeError if larger than MAX_RESULTS_BYTES, compressed or decompressed (a FIFO
    or a device is read only while it answers: :mod:`mqlab.inputs`)."""
    raw = inputs.read(path, MAX_RESULTS_BYTES)
    if raw[:2] == b"\x1f\x8b":  # gzip's magic: decompressed no further than the bound
        inflate = zlib.decompressobj(wbits=31)
        try:
            raw = inflate.decompress(raw, MAX_RESULTS_BYTES + 1)
        except zlib.error:
            raise ResultsShapeError("a damaged gzip file: not a results file") from None
        if not inflate.eof and len(raw) <= MAX_RESULTS_BYTES:
            raise ResultsShapeError("a gzip file cut short: not a results file")
    if len(raw) > MAX_RESULTS_BYTES:
        raise ResultsShapeError(f"larger than {MAX_RESULTS_BYTES:,} bytes: not a results file")
    return raw


#: deeper than any results file mqlab writes (under 10 levels): refused right after the
#: parse, before a reader walks it (every walk recurses, and Python stops near 1,000)
MAX_DEPTH = 64
_TOO_DEEP = f"nested too deeply (more than {MAX_DEPTH} levels) to be a results file"


def _too_deep(doc: Any) -> bool:
    """Whether ``doc`` nests lists and objects beyond :data:`MAX_DEPTH` (walked without
    recursion)."""
    todo: list[tuple[Any, int]] = [(doc, 1)]
    while todo:
        value, depth = todo.pop()
        if depth > MAX_DEPTH:
            return True
        inner = value.values() if isinstance(value, dict) else value
        todo += [(v, depth + 1) for v in inner if isinstance(v, (dict, list))]
    return False


def parse(raw: bytes) -> Any:
    """Strict JSON: no NaN or Infinity; a number no run writes is kept aside for the check;
    nesting no deeper than :data:`MAX_DEPTH`."""
    try:
        doc = json.loads(raw, parse_constant=_no_constant, parse_int=_int, parse_float=_float)
    except RecursionError:
        raise ResultsShapeError(_TOO_DEEP) from None
    except UnicodeDecodeError:
        raise ResultsShapeError("not a UTF-8 text file") from None
    except json.JSONDecodeError as exc:
        raise ResultsShapeError(
            f"not JSON ({exc.msg} at line {exc.lineno}): give a results file written by `mqlab run`"
        ) from None
    if isinstance(doc, (dict, list)) and _too_deep(doc):
        raise ResultsShapeError(_TOO_DEEP)
    return doc


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
            f"results schema {shown(schema)} is not one this mqlab reads "
            f"({', '.join(map(str, SCHEMAS))}): use the mqlab version that wrote it"
        )
    if schema < SCHEMA:
        legacy.normalise(doc)
    try:
        check(document(schema), doc, "")
    except ShapeProblem as exc:
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
