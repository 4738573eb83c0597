"""A step's record: the shape of one step in the results file, declared once.

:func:`mqlab.run.stepresult.build` makes a :class:`StepRecord` and writes it with
:meth:`StepRecord.to_wire`; the runner's later stages (loss explanation, hosts,
background, ceiling) add keys of their own to that map, which :meth:`StepRecord.from_wire`
keeps in :attr:`StepRecord.extra`. Its readers in the run (the live view's rows,
timeline and error tally, :mod:`mqlab.measure.aggregate`) read the typed fields.
The keys and their order are the results file's (``docs/results.md``); a results
file of any version is read by :mod:`mqlab.results.read`, not here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from mqlab.measure.load import Load

__all__ = ["Flag", "RecordSeries", "StepRecord", "Throughput"]

#: a field with this metadata is left out of the map when it is None (the key is absent)
_OPTIONAL = {"omit_none": True}
#: the field whose map is merged flat at its place (the broker's facts, later stages' keys)
_FLAT = {"flat": True}


@dataclass(frozen=True, slots=True)
class Throughput:
    """Completions per second over the window's whole seconds; None: not one was measured."""

    mean: float | None
    stdev: float | None
    seconds: int

    def to_wire(self) -> dict[str, Any]:
        return {"mean": self.mean, "stdev": self.stdev, "seconds": self.seconds}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> Throughput:
        return cls(d["mean"], d["stdev"], d["seconds"])


@dataclass(frozen=True, slots=True)
class RecordSeries:
    """Per-second figures from the step's ``t0`` (``t0_offset_s``: the window's first second)."""

    t0_offset_s: int
    sent: tuple[int, ...]
    received: tuple[int, ...]
    round_trip: tuple[int, ...]
    errors: tuple[int, ...]
    p50_ms: tuple[float | None, ...]
    p99_ms: tuple[float | None, ...]

    def to_wire(self) -> dict[str, Any]:
        return {
            f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
            for f in fields(self)
        }

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> RecordSeries:
        return cls(
            d["t0_offset_s"],
            *(tuple(d[f.name]) for f in fields(cls) if f.name != "t0_offset_s"),
        )

    def window(self, name: str) -> tuple[Any, ...]:
        """A series from the window's first second on (warm-up seconds dropped)."""
        values: tuple[Any, ...] = getattr(self, name)
        return values[max(0, -self.t0_offset_s) :]


@dataclass(frozen=True, slots=True)
class Flag:
    code: str
    message: str

    def to_wire(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One step as the results file stores it, in its keys' order (see the module doc)."""

    step: int
    driver: str
    plugin: str
    scenario: str
    pattern: str
    concurrency: int | None
    rate: float | None
    repeat: int
    servers: int
    targets: int
    consumers: int
    batch: int
    groups: int
    serializer: str
    envelope: bool
    message_size: str
    durable: bool
    queue_type: str
    timeout_s: float
    settings: Mapping[str, Any]  # the whole definition: the step's identity
    status: str  # done | interrupted
    workers_lost: tuple[str, ...]
    sent: int
    expected: int
    received: int
    round_trip: int
    lost: int
    unaccounted: int
    still_queued: int | None
    depth_unknown: bool
    #: link faults still in force when the drain ended and what they held, else None
    held: Mapping[str, Any] | None
    drain_s: float
    drain_end: str
    duplicates: int
    out_of_order: int
    errors: Mapping[str, int]
    error_messages: Mapping[str, str]
    throughput: Throughput
    latency_ms: Mapping[str, Any]  # the pattern's own kind (mqlab.measure.latency.summary)
    latency: Mapping[str, Mapping[str, Any]]  # every kind measured
    histograms: Mapping[str, str]
    open_loop: Mapping[str, Any] | None
    flags: tuple[Flag, ...]
    cpu: Mapping[str, Any] | None
    series: RecordSeries
    #: the broker's facts of the step; read back, every key a later stage added too
    extra: Mapping[str, Any] = field(default_factory=dict, metadata=_FLAT)
    link: Mapping[str, int] | None = field(default=None, metadata=_OPTIONAL)
    drained_in_s: float | None = None
    batch_rate: float | None = field(default=None, metadata=_OPTIONAL)
    per_queue: Mapping[str, Any] | None = field(default=None, metadata=_OPTIONAL)
    #: a pre-filled batch: ``filled_in_s`` from the window's start to its consumers'
    #: release, ``queued``: the step's messages the broker held then (None: unknown)
    prefill: Mapping[str, Any] | None = field(default=None, metadata=_OPTIONAL)
    roles: Mapping[str, Any] | None = field(default=None, metadata=_OPTIONAL)
    events: tuple[Mapping[str, Any], ...] | None = field(default=None, metadata=_OPTIONAL)
    phases: tuple[Mapping[str, Any], ...] | None = field(default=None, metadata=_OPTIONAL)
    update: Mapping[str, Any] | None = field(default=None, metadata=_OPTIONAL)
    faults: tuple[Mapping[str, Any], ...] | None = field(default=None, metadata=_OPTIONAL)
    #: added after the build by the loss explanation (the live view marks them on its timeline)
    spontaneous: tuple[Mapping[str, Any], ...] | None = field(default=None, metadata=_OPTIONAL)
    verdict: Mapping[str, Any] | None = field(default=None, metadata=_OPTIONAL)

    @property
    def load(self) -> Load:
        return Load(self.concurrency, self.rate)

    @property
    def completions(self) -> str:
        """The series a step's throughput counts: replies for a call, deliveries otherwise."""
        return "round_trip" if self.pattern == "call" else "received"

    def to_wire(self) -> dict[str, Any]:
        """The record as the results file holds it: JSON's maps and lists, nothing typed."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("flat"):
                out.update(value)
            elif not (value is None and f.metadata.get("omit_none")):
                out[f.name] = _wire(value)
        return out

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> StepRecord:
        """A record this version's runner made (and its later stages added to)."""
        args: dict[str, Any] = {}
        for f in fields(cls):
            if f.metadata.get("flat"):
                continue
            if f.name not in d:
                if f.default is MISSING and f.default_factory is MISSING:
                    raise KeyError(f"the step record lacks {f.name!r}")
                continue
            args[f.name] = _typed(f.name, d[f.name])
        declared = {f.name for f in fields(cls)}
        args["extra"] = {k: v for k, v in d.items() if k not in declared}
        return cls(**args)


def _wire(value: Any) -> Any:
    if hasattr(value, "to_wire"):
        return value.to_wire()
    if isinstance(value, tuple):
        return [_wire(v) for v in value]
    if isinstance(value, Mapping):
        return dict(value)
    return value


def _typed(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name == "throughput":
        return Throughput.from_wire(value)
    if name == "series":
        return RecordSeries.from_wire(value)
    if name == "flags":
        return tuple(Flag(f["code"], f["message"]) for f in value)
    if isinstance(value, list):
        return tuple(value)
    return value
