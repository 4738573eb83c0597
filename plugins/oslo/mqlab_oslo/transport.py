"""The ``oslo`` transport: oslo.messaging itself, as OpenStack services run it.

``rabbit`` driver (kombu over py-amqp), ``RPCClient.call``/``cast``, the
``messagingv2`` ``Notifier``, an RPC server and a notification listener on the
``threading`` executor. Every blocking oslo call runs in a pool of ``threads``
threads (:class:`mqlab.sdk.threads.ThreadPool`); oslo's executor threads hand each
message to the core's handler on the event loop (:func:`mqlab.sdk.threads.on_loop`).

mqlab's bodies are bytes; oslo carries JSON. A body travels as a latin-1 string
(lossless for any byte, one char per byte) in oslo's own envelope, so the
payload a server sees is the one the core encoded. oslo puts ``reply_q`` and
``msg_id`` inside its envelope instead of AMQP properties: its messages are not
the ``amqp091-oslo`` wire of the imitation plugins, though the exchanges and
queues are the same ones (see :mod:`mqlab.sdk.amqp`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Mapping
from typing import Any, ClassVar

from kombu.connection import Connection as _KombuConnection

from mqlab.errors import CallTimeout, ConnectionLost, DriverError, map_errors
from mqlab.sdk import amqp
from mqlab.sdk.connect import connect_first
from mqlab.sdk.threads import ThreadPool, on_loop
from mqlab.sdk.urls import hide_secret
from mqlab.transport import (
    CLOSE_LIMIT,
    Features,
    Handler,
    Option,
    Target,
    Transport,
    TransportConfig,
)
from mqlab_oslo.config import make_conf, oslo_messaging, transport_url

log = logging.getLogger(__name__)

#: kombu's Connection (its __init__ is untyped): the broker check and the clean-up
Connection: Any = _KombuConnection

#: the RPC method mqlab's endpoint exposes
METHOD = "mqlab"

_SEND_ERRORS = [
    (oslo_messaging.MessagingTimeout, lambda e: CallTimeout(f"no reply: {e}")),
    (oslo_messaging.MessageDeliveryFailure, lambda e: ConnectionLost(f"not delivered: {e}")),
    (oslo_messaging.RemoteError, lambda e: DriverError(f"the server failed: {e.exc_type}")),
    (oslo_messaging.MessagingException, lambda e: DriverError(str(e))),
]


#: where oslo's rabbit driver says it lost its broker and retries (it reconnects by itself)
_RABBIT_LOG = "oslo.messaging._drivers.impl_rabbit"


class _LostConnections(logging.Handler):
    """oslo.messaging reconnects silently but for an ERROR log line: each such line becomes
    a ``report()`` on the loop, so the step counts the lost connection instead of a log.

    oslo logs on one process-wide logger, whichever transport's connection it was: one
    handler for the process hands each line to one live transport per event loop (a
    worker's transports share its loop and its step), never to every transport, which
    counted one loss once per transport in the worker.
    """

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.live: dict[asyncio.AbstractEventLoop, list[Transport]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "unreachable" not in text and "Connection failed" not in text:
            return
        with _LOST_LOCK:
            live = [(loop, list(ts)) for loop, ts in self.live.items() if ts]
        for loop, transports in live:
            told = text
            for t in transports:
                for url in t.urls:
                    told = hide_secret(told, url)
            error = ConnectionLost(f"oslo.messaging: {told}")
            with contextlib.suppress(RuntimeError):  # the loop closed first
                loop.call_soon_threadsafe(transports[0].report, error)


_LOST = _LostConnections()
_LOST_LOCK = threading.Lock()


def _watch(transport: Transport) -> None:
    """Count ``transport``'s lost connections (see :class:`_LostConnections`)."""
    with _LOST_LOCK:
        if not _LOST.live:
            logging.getLogger(_RABBIT_LOG).addHandler(_LOST)
        _LOST.live.setdefault(asyncio.get_running_loop(), []).append(transport)


def _unwatch(transport: Transport) -> None:
    with _LOST_LOCK:
        for loop, transports in list(_LOST.live.items()):
            if transport in transports:
                transports.remove(transport)
            if not transports:
                del _LOST.live[loop]
        if not _LOST.live:
            logging.getLogger(_RABBIT_LOG).removeHandler(_LOST)


class _RpcEndpoint:
    """The one RPC method: the body in, the handler's reply (or None for a cast) out."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler

    def mqlab(self, ctxt: Any, body: str) -> str | None:
        reply = self._handler(body.encode("latin-1"))
        return None if reply is None else reply.decode("latin-1")


class NotificationEndpoint:
    """oslo dispatches by priority name, and listens to (one queue per) priority the
    endpoint has a method for: only the target's, as one queue per pool."""

    def __init__(self, handler: Handler, priority: str) -> None:
        def on_notification(
            ctxt: Any, publisher_id: str, event_type: str, payload: str, metadata: Any
        ) -> None:
            handler(payload.encode("latin-1"))

        setattr(self, priority, on_notification)


class OsloTransport(Transport):
    """oslo.messaging's rabbit driver, the real one, bridged to mqlab's asyncio worker."""

    wire = "oslo.messaging-rabbit"
    url_schemes: ClassVar[Mapping[str, int | None]] = {"amqp": 5672}
    # durable: oslo takes durability per process (amqp_durable_queues), not per target
    # mandatory: oslo sets the flag on replies only (direct_mandatory_flag), never requests
    features = Features(durable=False, fanout=True, server="rabbitmq")
    option_specs: ClassVar[Mapping[str, Option]] = {
        "threads": Option(
            (int,),
            16,
            "threads for blocking client calls, and oslo's executor_thread_pool_size",
            minimum=1,
            maximum=1024,
        ),
        "retry": Option(
            (int,),
            None,
            "oslo's retry for casts, calls and notifications: None or -1 forever, 0 never, N",
            allow_none=True,
            minimum=-1,
        ),
        "heartbeat": Option(
            (int,), 60, "oslo's heartbeat_timeout_threshold in seconds (0 = off)", minimum=0
        ),
        "prefetch": Option(
            (int,), 0, "oslo's rabbit_qos_prefetch_count (0 = unlimited)", minimum=0, maximum=65535
        ),
        "amqp_durable_queues": Option((bool,), False, "oslo's amqp_durable_queues"),
    }

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self._pool = ThreadPool(self.options["threads"], f"mqlab-oslo-{config.worker}")
        self._url = ""
        self._transports: dict[tuple[str, str], Any] = {}  # (kind, exchange) -> oslo transport
        self._clients: dict[Target, Any] = {}
        self._notifiers: dict[Target, Any] = {}
        self._servers: list[Any] = []
        self._declared = amqp.Declared()
        # transports, clients and notifiers are built on first use, in pool threads
        self._build_lock = threading.RLock()
        self._closed = False
        self._watched = False

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        """Check a broker answers (oslo itself would retry forever), then build lazily."""
        self._url = transport_url(self.urls)
        await connect_first(self.urls, self._probe, _explain, per_url=5.0, budget=10.0)
        _watch(self)
        self._watched = True

    async def _probe(self, url: str, timeout: float) -> None:
        await self._pool.run(_probe, url, timeout)

    async def aclose(self) -> None:
        """Stop servers, release transports, delete what mqlab's targets declared; never raises."""
        if self._closed:
            return
        self._closed = True
        if self._watched:
            _unwatch(self)
            self._watched = False
        try:
            await self._pool.run(self._close_blocking)
        except Exception:
            log.debug("oslo: close failed", exc_info=True)
        self._pool.shutdown()

    def _close_blocking(self) -> None:
        for server in self._servers:
            with contextlib.suppress(Exception):
                server.stop()
                server.wait()
        for transport in self._transports.values():
            reply_q = getattr(getattr(transport, "_driver", None), "_reply_q", None)
            if isinstance(reply_q, str):  # oslo's private name for a client's reply queue
                self._declared.queue(amqp.QueueDecl(reply_q, False, False, False))
        for transport in self._transports.values():
            with contextlib.suppress(Exception):
                transport.cleanup()
        if self.urls and self._declared.deletions():
            with contextlib.suppress(Exception):
                _delete(self.urls[0], self._declared, CLOSE_LIMIT / 2)

    def _transport(self, kind: str, exchange: str) -> Any:
        """One oslo transport per kind (rpc, notification) and exchange, built on first use."""
        key = (kind, exchange)
        with self._build_lock:
            return self._transports.get(key) or self._new_transport(key)

    def _new_transport(self, key: tuple[str, str]) -> Any:
        kind, exchange = key
        if self._closed:
            raise ConnectionLost("the oslo transport is closed")
        conf = make_conf(self.options, exchange)
        get = (
            oslo_messaging.get_rpc_transport
            if kind == "rpc"
            else oslo_messaging.get_notification_transport
        )
        transport = self._transports[key] = get(conf, url=self._url)
        return transport

    def _note(self, target: Target, queues: tuple[amqp.QueueDecl, ...]) -> None:
        # oslo declares these (names from mqlab's targets); mqlab deletes them at close.
        # durable ones follow oslo's amqp_durable_queues here, not the target
        durable = self.options["amqp_durable_queues"]
        self._declared.exchange(amqp.ExchangeDecl(target.exchange, "topic", durable, False))
        for queue in queues:
            if queue.arguments:
                continue  # a fanout copy: oslo deletes it itself when its connection closes
            self._declared.queue(amqp.QueueDecl(queue.name, durable, False, False))

    # -- server side ---------------------------------------------------------

    async def serve_rpc(self, target: Target, handler: Handler) -> None:
        """An oslo RPC server (threading executor) on ``<topic>``, ``<topic>.<server>``, fanout."""
        server_name = target.server or self.config.worker
        endpoint = _RpcEndpoint(on_loop(handler))

        def start() -> Any:
            transport = self._transport("rpc", target.exchange)
            where = oslo_messaging.Target(
                exchange=target.exchange, topic=target.topic, server=server_name
            )
            # threading is oslo 18's executor (the default; passing it is deprecated)
            server = oslo_messaging.get_rpc_server(transport, where, [endpoint])
            server.start()  # declares and consumes before it returns
            return server

        with map_errors(_SEND_ERRORS):
            server = await self._pool.run(start)
        self._servers.append(server)
        self._note(target, amqp.rpc_server_queues(target, server_name))

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        """An oslo notification listener; listeners of one ``pool`` share one queue."""
        endpoint = NotificationEndpoint(on_loop(handler), target.priority)

        def start() -> Any:
            transport = self._transport("notification", target.exchange)
            where = oslo_messaging.Target(exchange=target.exchange, topic=target.topic)
            listener = oslo_messaging.get_notification_listener(
                transport, [where], [endpoint], pool=pool or None
            )
            listener.start()
            return listener

        with map_errors(_SEND_ERRORS):
            self._servers.append(await self._pool.run(start))
        self._note(target, (amqp.notification_queue(target, pool),))

    # -- client side ---------------------------------------------------------

    def _client(self, target: Target) -> Any:
        client = self._clients.get(target)
        if client is not None:
            return client
        with self._build_lock:
            client = self._clients.get(target)
            if client is not None:
                return client
            where = oslo_messaging.Target(
                exchange=target.exchange,
                topic=target.topic,
                server=target.server,
                fanout=target.fanout or None,
            )
            transport = self._transport("rpc", target.exchange)
            client = oslo_messaging.get_rpc_client(transport, where, retry=self._retry())
            self._clients[target] = client
            # oslo declares the exchange it publishes to (even one nobody binds, which the
            # broker never auto-deletes): mqlab deletes it at close, if unused
            durable = self.options["amqp_durable_queues"]
            if target.fanout:
                self._declared.exchange(amqp.fanout_exchange(target))
            else:
                self._declared.exchange(amqp.ExchangeDecl(target.exchange, "topic", durable, False))
        return client

    def _retry(self) -> int | None:
        retry: int | None = self.options["retry"]
        return None if retry is None or retry < 0 else retry

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        """``RPCClient.call`` in a pool thread; oslo's MessagingTimeout is a CallTimeout."""

        def call() -> str:
            client = self._client(target).prepare(timeout=timeout)
            return str(client.call({}, METHOD, body=body.decode("latin-1")))

        with map_errors(_SEND_ERRORS):
            reply = await self._pool.run(call)
        return reply.encode("latin-1")

    async def cast(self, target: Target, body: bytes) -> None:
        """``RPCClient.cast``: returns once oslo published it."""

        def cast() -> None:
            self._client(target).cast({}, METHOD, body=body.decode("latin-1"))

        with map_errors(_SEND_ERRORS):
            await self._pool.run(cast)

    async def notify(self, target: Target, body: bytes) -> None:
        """``Notifier.<priority>`` (messagingv2). oslo logs a failed notification, never raises."""

        def notify() -> None:
            notifier = self._notifiers.get(target)
            if notifier is None:
                notifier = self._notifiers[target] = oslo_messaging.Notifier(
                    self._transport("notification", target.exchange),
                    publisher_id=f"mqlab.{self.config.worker}",
                    driver="messagingv2",
                    topics=[target.topic],
                    retry=self._retry(),
                )
                # oslo's notifier declares a queue named after the routing key, for
                # consumers that come later; mqlab deletes it at close
                key = amqp.notification_key(target)
                self._declared.queue(amqp.QueueDecl(key, False, False, False))
            getattr(notifier, target.priority)({}, "mqlab.message", body.decode("latin-1"))

        with map_errors(_SEND_ERRORS):
            await self._pool.run(notify)


def _probe(url: str, timeout: float) -> None:
    with Connection(url, connect_timeout=timeout) as conn:
        conn.ensure_connection(max_retries=1, timeout=timeout)


def _explain(url: str, exc: BaseException, timeout: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g}s"
    return hide_secret(str(exc) or type(exc).__name__, url)


def _delete(url: str, declared: amqp.Declared, timeout: float) -> None:
    """Delete ``declared``'s entities if unused (a refused delete closes the channel)."""
    with Connection(url, connect_timeout=timeout) as conn:
        # in use (406): someone else's to delete
        left = amqp.delete_unused_blocking(conn.channel, declared, (Exception,))
        if left is not None:
            left.close()
