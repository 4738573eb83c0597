"""The control channel between the controller and its workers.

Length-prefixed msgpack frames over a TCP stream on loopback: the same whether
a worker is a local process or an agent's on another host. Each frame is one
frozen dataclass below; on the wire it is a map whose ``type`` names the class:

| from | type | meaning |
|---|---|---|
| worker | ``hello`` | connected: ``worker``, ``pid``, ``token`` (the worker's key) |
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

Any local process can connect to a port on loopback, so the channel admits only the
worker it started: each worker gets a key of its own (:func:`new_token`, 256 random
bits) in its environment (:data:`TOKEN_ENV`, which only its user can read in
``/proc``; never on its command line), sends it in its ``hello``, and the controller
answers only the one ``hello`` that names a worker it is waiting for with that
worker's key (:func:`admits`). Anything else is closed without a word: no spec (with
its broker password) goes out, no figure comes in.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import struct
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, fields
from typing import Any, ClassVar, Self, TypeAlias

import msgpack

from mqlab.config.plan import WorkerSpec
from mqlab.errors import MqlabError
from mqlab.measure.figures import WorkerFigures

__all__ = [
    "FRAMES", "MAX_FRAME", "TOKEN_ENV", "CloseOld", "ClosedOld", "Consume", "Done", "Error",
    "Final", "Finish", "Frame", "FrameError", "Go", "Hello", "Ready", "Retire", "Snap",
    "Snapshot", "Spec", "Stop", "ToController", "ToWorker", "admits", "await_hello", "decode",
    "encode", "from_wire", "new_token", "recv", "recv_raw", "send", "send_raw",
]  # fmt: skip

_HEADER = struct.Struct("!I")
MAX_FRAME = 256 * 1024 * 1024
#: a ``hello`` is a few dozen bytes: a peer not yet admitted may send no more than this
MAX_HELLO = 4096
#: the environment variable a worker finds its key in (it removes it at once)
TOKEN_ENV = "MQLAB_WORKER_TOKEN"


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
    token: str  # the key its parent gave it privately: see the module's docstring

    def __repr__(self) -> str:  # the key never reaches a log or a traceback
        return f"Hello(worker={self.worker!r}, pid={self.pid})"


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


async def recv_raw(reader: asyncio.StreamReader, limit: int = MAX_FRAME) -> bytes:
    """One frame's bytes, undecoded (a host's supervisor relays them as they are)."""
    (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    if size > limit:
        raise FrameError(f"control frame of {size} bytes is too large")
    return await reader.readexactly(size)


def new_token() -> str:
    """A worker's key: given to it privately, checked once at its ``hello``."""
    return secrets.token_hex(32)


async def await_hello(reader: asyncio.StreamReader, timeout: float) -> Hello | None:
    """The first frame of a connection not yet admitted: a ``hello`` of a few bytes within
    ``timeout``; None for anything else (too large, too late, malformed, another frame)."""
    try:
        frame = decode(await asyncio.wait_for(recv_raw(reader, MAX_HELLO), timeout))
    except (FrameError, TimeoutError, asyncio.IncompleteReadError, ConnectionError):
        return None
    return frame if isinstance(frame, Hello) else None


def admits(frame: Hello, token: str) -> bool:
    """Whether ``frame`` carries ``token``, the key of the worker it names (in constant time)."""
    return bool(token) and hmac.compare_digest(frame.token.encode(), token.encode())
