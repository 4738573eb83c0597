"""The transport contract: everything a plugin author needs is in this file.

A plugin is a subclass of :class:`Transport`, registered under the entry-point
group ``mqlab.transports``. The core instantiates it once per worker process
with the broker URL(s) and the driver's options (already checked against
:attr:`Transport.options`), then drives it through an ``async with`` block.

Bodies are opaque ``bytes``: the core encodes every message (json or msgpack,
with or without the oslo envelope) so every driver carries identical payloads.

- ``start()`` / ``aclose()``: connect / release everything; ``aclose`` never raises.
- ``serve_rpc(target, handler)`` (server): consume calls and casts for ``target``
  (``target.server`` is this server's own name); return once consuming. For a
  call, publish the handler's reply bytes back to the caller.
- ``serve_notifications(target, pool, handler)`` (server): listeners with the
  same ``pool`` share messages; every pool gets all of them.
- ``call(target, body, timeout)`` (client): send, return the reply bytes;
  :class:`CallTimeout` after ``timeout`` seconds.
- ``cast(target, body)`` / ``notify(target, body)`` (client): send, no reply;
  return when the driver considers the message sent.

Errors: raise only :mod:`mqlab.errors` types (``Undeliverable``, ``CallTimeout``,
``ConnectionLost``, ``ConnectFailed``, ``DriverError``), chained with ``from``.
A pattern the plugin does not support is refused at start-up by the core, from
:attr:`Transport.features`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, Self

from mqlab.errors import OptionError

#: A server handler: takes the request body, returns the reply body for a call
#: and ``None`` for a cast or a notification. Synchronous on purpose: the core's
#: handler only decodes and records, and a plugin calls it from its consumer.
Handler = Callable[[bytes], bytes | None]


@dataclass(frozen=True, slots=True)
class Target:
    """Where a message goes, as oslo.messaging's Target.

    ``exchange`` is the control exchange (RPC) or the notification exchange;
    ``topic`` the RPC topic or notification topic; ``server`` narrows an RPC to
    one server; ``fanout`` sends an RPC cast to every server of the topic.
    """

    exchange: str
    topic: str
    server: str | None = None
    fanout: bool = False
    durable: bool = False
    priority: str = "info"  # notifications only: routing key <topic>.<priority>

    def to_server(self, server: str) -> Target:
        return Target(self.exchange, self.topic, server, False, self.durable, self.priority)


@dataclass(frozen=True, slots=True)
class Features:
    """Facts a plugin declares about itself; the core refuses what is not declared."""

    patterns: frozenset[str] = frozenset({"call", "cast", "notify"})
    at_most_once: bool = False  # can be configured for pure at-most-once delivery
    mandatory: bool = False  # can fail fast when nobody listens
    durable: bool = False  # honours Target.durable
    fanout: bool = False  # supports Target.fanout casts
    needs_broker: bool = True  # False: brokerless (zmq) or in-process
    in_process: bool = False  # True: servers and clients must share one process


@dataclass(frozen=True, slots=True)
class Option:
    """One driver option a plugin accepts: its type(s), default and meaning."""

    types: tuple[type, ...]
    default: Any
    help: str
    choices: tuple[Any, ...] = ()
    allow_none: bool = False


def parse_options(
    plugin: str, spec: Mapping[str, Option], raw: Mapping[str, Any]
) -> dict[str, Any]:
    """Check ``raw`` driver options against ``spec``; return them with defaults filled.

    Raises :class:`OptionError` naming the option for anything unknown or ill-typed.
    """
    unknown = sorted(set(raw) - set(spec))
    if unknown:
        known = ", ".join(sorted(spec)) or "none"
        raise OptionError(plugin, unknown[0], f"not supported (this plugin's options: {known})")
    out: dict[str, Any] = {}
    for name, opt in spec.items():
        if name not in raw:
            out[name] = opt.default
            continue
        value = raw[name]
        if value is None and opt.allow_none:
            out[name] = None
            continue
        # bool is an int subclass; an int option must not silently take true/false
        ok = isinstance(value, opt.types) and not (
            isinstance(value, bool) and bool not in opt.types
        )
        if not ok:
            expected = " or ".join(t.__name__ for t in opt.types)
            raise OptionError(plugin, name, f"expected {expected}, got {value!r}")
        if opt.choices and value not in opt.choices:
            choices = ", ".join(repr(c) for c in opt.choices)
            raise OptionError(plugin, name, f"expected one of {choices}, got {value!r}")
        out[name] = value
    return out


@dataclass(frozen=True, slots=True)
class TransportConfig:
    """What the core hands a transport: broker URL(s) and its checked options."""

    urls: tuple[str, ...]
    options: Mapping[str, Any] = field(default_factory=dict)
    worker: str = "w0"  # this worker's name, unique within a step (use it in queue names)


class Transport(abc.ABC):
    """Base class of every transport plugin. Subclass, declare, implement."""

    #: wire family; drivers of one family interoperate (e.g. ``amqp091-oslo``)
    wire: ClassVar[str] = "unknown"
    features: ClassVar[Features] = Features()
    #: the options this plugin accepts beyond ``plugin``
    options: ClassVar[Mapping[str, Option]] = {}

    def __init__(self, config: TransportConfig) -> None:
        self.config = config
        self.urls: Sequence[str] = config.urls
        self.opts: Mapping[str, Any] = config.options

    @classmethod
    def check_options(cls, plugin: str, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Validate options before any worker starts (``mqlab validate`` calls this)."""
        return parse_options(plugin, cls.options, raw)

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Connect. Raise :class:`ConnectFailed` with a clear message when you cannot."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release every connection and task. Must not raise."""

    async def serve_rpc(self, target: Target, handler: Handler) -> None:
        raise NotImplementedError

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        raise NotImplementedError

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        raise NotImplementedError

    async def cast(self, target: Target, body: bytes) -> None:
        raise NotImplementedError

    async def notify(self, target: Target, body: bytes) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
