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
- ``report(error)`` (call it, do not override): an error no call or cast raised,
  such as a connection that dropped in the background and is being re-established;
  the core counts it under ``error.kind`` with its message, and fails no message
  for it (the ledger counts what the drop lost). A :class:`ConnectionLost` is
  also a ``connection_lost`` event on the step's timeline.
- ``notice(kind, cause, connection)`` (call it, do not override): something the
  broker did to a connection that is not an error: one of :data:`SPONTANEOUS`
  (``reconnected``, ``consumer_cancelled``, ``blocked``, ``unblocked``,
  ``returned``, ``nacked``). Each becomes an event on the step's timeline, with
  this worker, its time, ``connection`` (a name the driver gives it, such as the
  connection name the broker shows) and ``cause`` in words.
- ``begin_cast(target, body)`` (client, optional): what the core calls for every
  cast. The default returns ``cast(target, body)`` for the core to await; a
  driver whose send usually completes at once overrides it to send now and
  return ``None``, and returns an awaitable only when the cast has to wait. A
  subclass that overrides ``cast`` alone still has its ``cast`` called.

Errors: raise only :mod:`mqlab.errors` types (``Undeliverable``, ``CallTimeout``,
``ConnectionLost``, ``ConnectFailed``, ``DriverError``), chained with ``from``. The
patterns follow from what a plugin overrides (``call``/``cast`` need ``serve_rpc``,
``notify`` needs ``serve_notifications``); the core refuses others before a worker
starts, as it refuses what :attr:`Transport.features` does not declare.

Options: :attr:`Transport.option_specs` is the schema; ``self.options`` the values,
checked once by the core, defaults filled; combinations in :meth:`check_combinations`.

Cancellation safety: the core cancels a send it stops waiting for (a deadline, a step's
end, Ctrl-C). A library call that must not be cut in half (a transaction, a flush) is
shielded, or its connection replaced, never reused half-done.

Timing rules (the core enforces them, the kit tests them):

- ``start()`` returns or raises within :data:`START_LIMIT` seconds;
- ``aclose()`` returns within :data:`CLOSE_LIMIT` seconds (the worker exits anyway);
- ``call()`` raises :class:`CallTimeout` within ``timeout + CALL_TIMEOUT_SLACK``.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, Self

from mqlab.errors import ConnectionLost, TransportError

_LOG = logging.getLogger("mqlab.transport")

#: seconds ``start()`` may take (connect, declare); the runner gives up on a worker after it
START_LIMIT = 30.0
#: seconds ``aclose()`` may take; the worker exits anyway after it
CLOSE_LIMIT = 5.0
#: a call raises CallTimeout within its timeout plus this many seconds
CALL_TIMEOUT_SLACK = 1.0

#: the three workload patterns, in the order mqlab lists them
PATTERNS = ("call", "cast", "notify")

#: what :meth:`Transport.notice` and :meth:`Transport.report` put on a step's timeline:
#: a connection lost (``report(ConnectionLost(...))``), and re-established; a consumer
#: the broker cancelled; ``connection.blocked`` / ``unblocked`` (the broker stopped /
#: resumed reading a publisher's connection); a publish the broker refused
#: (``basic.return``, ``basic.nack``)
SPONTANEOUS = (
    "connection_lost", "reconnected", "consumer_cancelled", "blocked", "unblocked",
    "returned", "nacked",
)  # fmt: skip

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
    #: the broker queue type a server declares its queues as: "classic", "mirrored"
    #: (classic; the core sets the mirroring policy) or "quorum"; plugins that
    #: declare ``Features.queue_types`` honour it, the core refuses it for the others
    queue_type: str = "classic"

    def to_server(self, server: str) -> Target:
        return Target(
            self.exchange, self.topic, server, False, self.durable, self.priority, self.queue_type
        )

    def route(self) -> tuple[str, tuple[str, ...]]:
        """Which copy of an RPC this is, and the names that address it.

        ``("all", (exchange, topic))`` for a fanout cast, ``("to", (exchange,
        topic, server))`` for one server, ``("rpc", (exchange, topic))`` for the
        topic's servers to share. A plugin that names its own subjects, topics or
        keys joins these with its separator and escaping.
        """
        if self.fanout:
            return "all", (self.exchange, self.topic)
        if self.server:
            return "to", (self.exchange, self.topic, self.server)
        return "rpc", (self.exchange, self.topic)

    def describe(self) -> str:
        """How messages name this target: ``'exchange/topic.server'``, ``(fanout)`` added."""
        where = f"{self.exchange}/{self.topic}"
        if self.server:
            where = f"{where}.{self.server}"
        return f"{where!r} (fanout)" if self.fanout else repr(where)


@dataclass(frozen=True, slots=True)
class Features:
    """Facts a plugin declares about itself; the core refuses what is not declared.

    The patterns are not declared here: they follow from the methods a plugin
    overrides (see :meth:`Transport.patterns`).
    """

    at_most_once: bool = False  # can be configured for pure at-most-once delivery
    mandatory: bool = False  # can fail fast when nobody listens
    durable: bool = False  # honours Target.durable
    fanout: bool = False  # supports Target.fanout casts
    #: the server mqlab starts with ``[broker] managed = true`` and samples ("rabbitmq", or
    #: one a plugin ships, ``mqlab.servers``); None: none started nor measured (brokerless,
    #: in-process, or a broker the driver's ``url`` names: its broker CPU is null)
    server: str | None = None
    in_process: bool = False  # True: servers and clients must share one process
    #: honours Target.queue_type (classic, mirrored, quorum RabbitMQ queues)
    queue_types: bool = False

    @property
    def needs_server(self) -> bool:
        return self.server is not None

    def declares(self, feature: str) -> bool:
        """True if the plugin declares ``feature`` (a boolean field of this class)."""
        return feature in FEATURES and bool(getattr(self, feature))


#: the features an option or a profile field can ask for, and what each promises
FEATURES = {
    "at_most_once": "pure at-most-once delivery",
    "mandatory": "failing fast when nobody listens",
    "durable": "durable queues and messages",
    "fanout": "fanout casts",
    "queue_types": "mirrored and quorum queues",
}


@dataclass(frozen=True, slots=True)
class Option:
    """The schema of one driver option: its type(s), default, meaning and allowed values.

    ``minimum``/``maximum`` bound a number (inclusive); ``choices`` lists the
    values allowed; ``allow_none`` lets ``None`` through whatever the bounds.
    ``feature`` names the :class:`Features` field that the values in ``needs``
    ask for (``retry = 0`` asks for ``at_most_once``): the core refuses such a
    value when the plugin does not declare that feature, so a run never claims a
    property its driver does not have.
    """

    types: tuple[type, ...]
    default: Any
    help: str
    choices: tuple[Any, ...] = ()
    allow_none: bool = False
    minimum: float | None = None
    maximum: float | None = None
    feature: str = ""
    #: the values that ask for ``feature``, or a test of the value (``bool``: any non-empty)
    needs: tuple[Any, ...] | Callable[[Any], bool] = ()

    def asks(self, value: Any) -> str:
        """The feature ``value`` asks for ("" for none)."""
        if callable(self.needs):
            return self.feature if self.needs(value) else ""
        # bool == int in Python: True must not match a needs of 1, nor 0 match False
        hit = any(value == v and type(value) is type(v) for v in self.needs)
        return self.feature if hit else ""

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` for this option, or None."""
        if value is None and self.allow_none:
            return None
        # bool is an int subclass; an int option must not silently take true/false
        ok = isinstance(value, self.types) and not (
            isinstance(value, bool) and bool not in self.types
        )
        if not ok:
            expected = " or ".join(t.__name__ for t in self.types)
            return f"expected {expected}, got {value!r}"
        if self.choices and value not in self.choices:
            choices = ", ".join(repr(c) for c in self.choices)
            return f"expected one of {choices}, got {value!r}"
        low, high = self.minimum, self.maximum
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not (
            (low is not None and value < low) or (high is not None and value > high)
        ):
            return None
        if low is not None and high is not None:
            return f"expected {low:g}..{high:g}, got {value!r}"
        if low is not None:
            return f"expected a number >= {low:g}, got {value!r}"
        return f"expected a number <= {high:g}, got {value!r}"


#: the ``connect_timeout`` option of a plugin that connects with
#: :func:`mqlab.sdk.connect.connect_first`: its ``per_url`` (the budget is that per URL)
CONNECT_TIMEOUT = Option((int, float), 5.0, "seconds to connect to one URL", minimum=0.1)


class OptionConflict(ValueError):
    """Raised by :meth:`Transport.check_combinations`: names the option and the problem.

    The core turns it into an :class:`OptionError` naming the plugin too.
    """

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"{option}: {problem}")
        self.option = option
        self.problem = problem


@dataclass(frozen=True, slots=True)
class TransportConfig:
    """What the core hands a transport: broker URL(s) and its checked options."""

    urls: tuple[str, ...]
    options: Mapping[str, Any] = field(default_factory=dict)
    worker: str = "w0"  # this worker's name, unique within a step (use it in queue names)
    #: a directory only this step's workers share (mode 0700, inside the step's own
    #: ``mkdtemp`` directory, removed when the step ends): where a plugin keeps files its
    #: clients and servers must find (zmq's registry); None outside a run
    scratch_dir: str | None = None


class Transport(abc.ABC):
    """Base class of every transport plugin. Subclass, declare, implement."""

    #: wire family; drivers of one family interoperate (e.g. ``amqp091-oslo``)
    wire: ClassVar[str] = "unknown"
    #: the driver whose semantics this plugin rebuilds, when it is mqlab's rebuild and not
    #: that driver's own code ("oslo.messaging's kombu (rabbit) driver"); every table of
    #: results says so beside the figures
    rebuild_of: ClassVar[str] = ""
    features: ClassVar[Features] = Features()
    #: the schema of the options this plugin accepts beyond ``plugin``
    option_specs: ClassVar[Mapping[str, Option]] = {}
    #: URL schemes a driver may be given, each with its default port (None: no host, as
    #: ``ipc://``); the profile check refuses others (empty: any scheme, with its port)
    url_schemes: ClassVar[Mapping[str, int | None]] = {}
    #: set by the core on each instance: where :meth:`report` sends an error (a
    #: worker counts it); a class default, so a plugin's own ``__init__`` cannot lose it
    on_report: Callable[[TransportError], None] | None = None
    #: set by the core on each instance: where :meth:`notice` sends an event
    on_notice: Callable[[str, str, str], None] | None = None

    def __init__(self, config: TransportConfig) -> None:
        self.config = config
        self.urls: Sequence[str] = config.urls
        #: this driver's option values; defaults filled for what the config leaves out
        self.options: Mapping[str, Any] = {
            **{name: spec.default for name, spec in self.option_specs.items()},
            **config.options,
        }

    @classmethod
    def server_for(cls, options: Mapping[str, Any]) -> str | None:
        """The managed server a driver with these (checked) options talks to.

        ``features.server`` unless a plugin speaks to several kinds of server and
        an option picks one (amqp1's ``broker``: RabbitMQ or Artemis).
        """
        return cls.features.server

    @classmethod  # noqa: B027 - an optional hook
    def check_combinations(cls, options: Mapping[str, Any]) -> None:
        """Refuse option values that are fine alone but not together.

        ``options`` are already checked one by one, defaults filled. Raise
        :class:`OptionConflict` naming the option to change. Called once, by the
        core, before any worker starts.
        """

    @classmethod
    def across_hosts(cls, options: Mapping[str, Any]) -> str | None:
        """Why a driver with these (checked) options cannot have its servers and its
        clients on different machines, in one line saying what to set; None when it can.

        Called by the core for a profile whose ``[hosts]`` are other machines, before
        anything starts: what only one machine can reach (an address of its own
        loopback, a directory of its own disk) would lose every message there. The core
        itself refuses a driver URL on loopback.
        """
        return None

    def report(self, error: TransportError, connection: str = "") -> None:
        """Tell the core of an error that no call or cast raised.

        For what happens in the background: a connection lost and being
        re-established, a consumer cancelled by the server. The step counts it
        under ``error.kind`` with its message (password-free, as every error's),
        so a user sees that something happened and what; no message counts as
        failed for it. Call it on the event loop's thread (a driver working in
        threads hands it over with ``loop.call_soon_threadsafe``). Outside a
        worker (tests, scripts) it is logged.
        """
        if self.on_report is not None:
            self.on_report(error)
        else:
            _LOG.warning("%s: %s", error.kind, error)
        if isinstance(error, ConnectionLost) and self.on_notice is not None:
            # a lost connection is also an event on the step's timeline (``connection``:
            # the driver's name for it, as for :meth:`notice`)
            self.on_notice("connection_lost", str(error), connection)

    def notice(self, kind: str, cause: str, connection: str = "") -> None:
        """Tell the core of something the broker did to a connection (see :data:`SPONTANEOUS`).

        Not an error and not counted as one: an event on the step's timeline, with
        ``connection`` (the driver's name for it; the worker's name when empty) and
        ``cause`` in words, which the step's losses are explained by. Call it on the
        event loop's thread, as :meth:`report`. Outside a worker it is logged.
        """
        if kind not in SPONTANEOUS:
            raise ValueError(f"unknown event kind {kind!r}: expected one of {SPONTANEOUS}")
        if self.on_notice is not None:
            self.on_notice(kind, cause, connection)
        else:
            _LOG.info("%s: %s %s", kind, connection, cause)

    @classmethod
    def patterns(cls) -> frozenset[str]:
        """The patterns this plugin supports: those whose methods it overrides."""
        rpc = _overrides(cls, "serve_rpc")
        found = {
            "call": rpc and _overrides(cls, "call"),
            "cast": rpc and _overrides(cls, "cast"),
            "notify": _overrides(cls, "serve_notifications") and _overrides(cls, "notify"),
        }
        return frozenset(p for p, ok in found.items() if ok)

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

    def begin_cast(self, target: Target, body: bytes) -> Awaitable[None] | None:
        """Start a cast: ``None`` once it is sent as :meth:`cast` would send it, else
        an awaitable that completes it (the core awaits it at once).

        The default leaves everything to :meth:`cast`. Override it when a send
        usually completes without waiting (a non-blocking socket write, an
        in-memory queue with room): it spares the coroutine :meth:`cast` costs
        per message, which is a measurable share of a fast driver's client. It
        must keep :meth:`cast`'s semantics (routing, order, errors: raise what
        :meth:`cast` raises, here or from the awaitable).
        """
        return self.cast(target, body)

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


def _overrides(cls: type[Transport], method: str) -> bool:
    return getattr(cls, method) is not getattr(Transport, method)


def cast_starter(transport: Transport) -> Callable[[Target, bytes], Awaitable[None] | None]:
    """What the core calls to cast through ``transport``: its ``begin_cast``, unless
    a subclass overrides ``cast`` below the class that overrides ``begin_cast`` (a
    driver built on another's): then that ``cast``, so the override is not skipped.
    """
    mro = type(transport).__mro__

    def owner(method: str) -> type:
        return next(k for k in mro if method in vars(k))

    if issubclass(owner("begin_cast"), owner("cast")):
        return transport.begin_cast
    return transport.cast
