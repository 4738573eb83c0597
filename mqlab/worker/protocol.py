"""The control channel between the controller and its workers.

Length-prefixed msgpack frames over a TCP stream on loopback: the same whether
a worker is a local process or an agent's on another host. Each frame is one
frozen dataclass below; on the wire it is a map whose ``type`` names the class:

| from | type | meaning |
|---|---|---|
| worker | ``hello`` | connected: ``worker``, ``pid`` |
| controller | ``spec`` | the :class:`~mqlab.config.plan.WorkerSpec` as a map |
| worker | ``ready`` / ``error`` | transport started and serving / why not (``message``, ``kind``) |
| controller | ``go`` | ``t0``, ``start``, ``window_start``, ``window_end`` (monotonic ns) |
| worker | ``snapshot`` | counters, series and histogram so far (every second) |
| worker | ``done`` | clients: every send finished or timed out |
| controller | ``stop`` | stop sending now (Ctrl-C) |
| controller | ``snap`` | send a snapshot now (the drain polls with it) |
| controller | ``finish`` | report and exit |
| controller | ``retire`` | rolling update, graceful: stop, finish in hand, close, report, exit |
| controller | ``close-old`` | rolling update across wire families: close the old transport |
| controller | ``consume`` | a pre-filled step: the held servers start consuming now |
| worker | ``closed-old`` | the old transport is closed: it serves on the new one only |
| worker | ``final`` | the last snapshot (receipts are in the ledger files) |

A frame of a type this version does not know, or one without what its type needs,
is refused with :class:`FrameError`: a worker and its controller (or a host's
supervisor) must be the same mqlab version.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, fields
from typing import Any, ClassVar, Self, TypeAlias

import msgpack

from mqlab.config.plan import WorkerSpec
from mqlab.errors import MqlabError
from mqlab.measure.figures import WorkerFigures

__all__ = [
    "FRAMES", "MAX_FRAME", "CloseOld", "ClosedOld", "Consume", "Done", "Error", "Final",
    "Finish", "Frame", "FrameError", "Go", "Hello", "Ready", "Retire", "Snap", "Snapshot",
    "Spec", "Stop", "ToController", "ToWorker", "decode", "encode", "from_wire", "recv",
    "recv_raw", "send", "send_raw",
]  # fmt: skip

_HEADER = struct.Struct("!I")
MAX_FRAME = 256 * 1024 * 1024


class FrameError(MqlabError, ValueError):
    """A control frame this version cannot read: unknown type, or malformed."""


#: the field types a plain frame carries, as the annotations spell them, and in words
_SCALARS: dict[str, tuple[type, str]] = {"int": (int, "an integer"), "str": (str, "a string")}


class _Frame:
    """What every frame shares: its ``type`` on the wire, its sender, its plain fields."""

    __slots__ = ()
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]
    TYPE: ClassVar[str]
    FROM: ClassVar[str]  # "worker" or "controller": who sends it

    def to_wire(self) -> dict[str, Any]:
        """The frame as a msgpack-ready map."""
        return {"type": self.TYPE, **{f.name: getattr(self, f.name) for f in fields(self)}}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> Self:
        """The frame from its map; :class:`FrameError` names a missing or mistyped field."""
        args: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in d:
                if f.default is MISSING:
                    raise FrameError(f"control frame {cls.TYPE!r} lacks its {f.name!r}")
                continue
            value, (want, words) = d[f.name], _SCALARS[str(f.type)]
            if not isinstance(value, want) or isinstance(value, bool):
                raise FrameError(
                    f"control frame {cls.TYPE!r}: its {f.name!r} is {value!r}, not {words}"
                )
            args[f.name] = value
        return cls(**args)


@dataclass(frozen=True, slots=True)
class Hello(_Frame):
    TYPE: ClassVar[str] = "hello"
    FROM: ClassVar[str] = "worker"
    worker: str
    pid: int


@dataclass(frozen=True, slots=True)
class Spec(_Frame):
    TYPE: ClassVar[str] = "spec"
    FROM: ClassVar[str] = "controller"
    spec: WorkerSpec

    def to_wire(self) -> dict[str, Any]:
        return {"type": self.TYPE, "spec": self.spec.to_wire()}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> Self:
        spec = d.get("spec")
        if not isinstance(spec, dict):
            raise FrameError("control frame 'spec' lacks its spec map")
        try:
            return cls(WorkerSpec.from_wire(spec))
        except (KeyError, TypeError, ValueError) as exc:
            raise FrameError(f"control frame 'spec' is malformed: {exc!r}") from exc


@dataclass(frozen=True, slots=True)
class Ready(_Frame):
    TYPE: ClassVar[str] = "ready"
    FROM: ClassVar[str] = "worker"


@dataclass(frozen=True, slots=True)
class Error(_Frame):
    TYPE: ClassVar[str] = "error"
    FROM: ClassVar[str] = "worker"
    kind: str  # the error's class (a TransportError's kind)
    message: str


@dataclass(frozen=True, slots=True)
class Go(_Frame):
    TYPE: ClassVar[str] = "go"
    FROM: ClassVar[str] = "controller"
    t0: int
    start: int
    window_start: int
    window_end: int
    #: a successor continues its predecessor's open-loop schedule from here (0: from start)
    schedule_from: int = 0


class _Figures(_Frame):
    """A frame that carries a worker's figures, flat in the map beside its ``type``."""

    __slots__ = ()
    figures: WorkerFigures

    def to_wire(self) -> dict[str, Any]:
        return {"type": self.TYPE, **self.figures.to_wire()}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> Self:
        try:
            return cls(WorkerFigures.from_wire(dict(d)))  # type: ignore[call-arg]
        except (KeyError, TypeError, ValueError) as exc:
            raise FrameError(f"control frame {cls.TYPE!r} is malformed: {exc!r}") from exc


@dataclass(frozen=True, slots=True)
class Snapshot(_Figures):
    TYPE: ClassVar[str] = "snapshot"
    FROM: ClassVar[str] = "worker"
    figures: WorkerFigures


@dataclass(frozen=True, slots=True)
class Done(_Frame):
    TYPE: ClassVar[str] = "done"
    FROM: ClassVar[str] = "worker"


@dataclass(frozen=True, slots=True)
class Stop(_Frame):
    TYPE: ClassVar[str] = "stop"
    FROM: ClassVar[str] = "controller"


@dataclass(frozen=True, slots=True)
class Snap(_Frame):
    TYPE: ClassVar[str] = "snap"
    FROM: ClassVar[str] = "controller"


@dataclass(frozen=True, slots=True)
class Finish(_Frame):
    TYPE: ClassVar[str] = "finish"
    FROM: ClassVar[str] = "controller"


@dataclass(frozen=True, slots=True)
class Retire(_Frame):
    TYPE: ClassVar[str] = "retire"
    FROM: ClassVar[str] = "controller"


@dataclass(frozen=True, slots=True)
class CloseOld(_Frame):
    TYPE: ClassVar[str] = "close-old"
    FROM: ClassVar[str] = "controller"


@dataclass(frozen=True, slots=True)
class Consume(_Frame):
    TYPE: ClassVar[str] = "consume"
    FROM: ClassVar[str] = "controller"


@dataclass(frozen=True, slots=True)
class ClosedOld(_Frame):
    TYPE: ClassVar[str] = "closed-old"
    FROM: ClassVar[str] = "worker"


@dataclass(frozen=True, slots=True)
class Final(_Figures):
    TYPE: ClassVar[str] = "final"
    FROM: ClassVar[str] = "worker"
    figures: WorkerFigures


ToWorker: TypeAlias = Spec | Go | Stop | Snap | Finish | Retire | CloseOld | Consume
ToController: TypeAlias = Hello | Ready | Error | Snapshot | Done | ClosedOld | Final
Frame: TypeAlias = ToWorker | ToController

#: every frame class, in the table's order
FRAMES: tuple[type[Frame], ...] = (
    Hello, Spec, Ready, Error, Go, Snapshot, Done, Stop, Snap, Finish, Retire, CloseOld,
    Consume, ClosedOld, Final,
)  # fmt: skip
_BY_TYPE: dict[str, type[Frame]] = {cls.TYPE: cls for cls in FRAMES}


def from_wire(msg: object) -> Frame:
    """The frame a decoded map is; :class:`FrameError` if it is none this version knows."""
    if not isinstance(msg, dict):
        raise FrameError(f"control frame is a {type(msg).__name__}, not a map")
    kind = msg.get("type")
    cls = _BY_TYPE.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise FrameError(
            f"control frame of unknown type {kind!r} (this mqlab knows "
            f"{', '.join(sorted(_BY_TYPE))}): are the controller and its workers "
            "the same mqlab version?"
        )
    return cls.from_wire(msg)


def encode(frame: Frame) -> bytes:
    data: bytes = msgpack.packb(frame.to_wire(), use_bin_type=True)
    return data


def decode(data: bytes) -> Frame:
    try:
        msg = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise FrameError(f"control frame is not msgpack: {exc}") from exc
    return from_wire(msg)


async def send(writer: asyncio.StreamWriter, frame: Frame) -> None:
    await send_raw(writer, encode(frame))


async def send_raw(writer: asyncio.StreamWriter, data: bytes) -> None:
    """A frame's bytes as they are (a host's supervisor relays the controller's)."""
    writer.write(_HEADER.pack(len(data)) + data)
    await writer.drain()


async def recv(reader: asyncio.StreamReader) -> Frame:
    """One frame; raises ``asyncio.IncompleteReadError`` when the peer went away."""
    return decode(await recv_raw(reader))


async def recv_raw(reader: asyncio.StreamReader) -> bytes:
    """One frame's bytes, undecoded (a host's supervisor relays them as they are)."""
    (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    if size > MAX_FRAME:
        raise FrameError(f"control frame of {size} bytes is too large")
    return await reader.readexactly(size)
