"""One broker connection that survives failures: failover, channels, consumers.

The link holds one pika connection with three channels (``connections =
"single"``, oslo's default connection factory, is one link for everything;
``"pool"`` is two, one to publish on and one to consume and answer on, each
healing on its own):

- ``pub``: the client's calls, casts and notifications (confirm mode when the
  settings ask for confirms);
- ``sub``: every consumer, and the server's replies (published from the
  delivery callback on the channel the request came in on);
- ``decl``: declarations, so a refused declare (406, 404) closes a channel no
  message depends on (held by :class:`~mqlab_pika.topology.Topology`).

When the connection drops, the link moves to the NEXT URL of the list (round
robin), reopens its channels, declares its queues again and resumes every
consumer (:mod:`mqlab_pika.consumers`). Sends wait for that through
:meth:`Link.publisher`; publishing itself is :mod:`mqlab_pika.publisher`. Reconnecting,
reporting the loss and the return, and the link's tasks are the SDK's
(:class:`mqlab.sdk.link.Link`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from pika.adapters.asyncio_connection import AsyncioConnection
from pika.frame import Method

from mqlab.errors import ConnectionLost, DriverError
from mqlab.sdk import amqp, link
from mqlab.sdk.amqp import ExchangeDecl
from mqlab.sdk.backoff import Backoff
from mqlab.sdk.lifecycle import blocking
from mqlab.sdk.urls import hide_secret, mask
from mqlab.transport import Transport
from mqlab_pika import bridge, urls
from mqlab_pika.bridge import Chan, Gone
from mqlab_pika.consumers import Acker, ConsumerSpec, acking
from mqlab_pika.options import Settings
from mqlab_pika.publisher import Publisher
from mqlab_pika.topology import Topology

LOG = logging.getLogger(__name__)


class Link(link.Link[AsyncioConnection]):
    """A self-healing connection to the first reachable URL of ``urls``."""

    gone = (Gone, TimeoutError, OSError)

    def __init__(
        self, transport: Transport, urls_: Sequence[str], settings: Settings, name: str
    ) -> None:
        super().__init__(
            transport, urls_, name,
            per_url=settings.connect_timeout,
            budget=settings.connect_timeout,  # start(): every URL within connect_timeout
            backoff=Backoff(settings.retry_delay, settings.retry_delay),
        )  # fmt: skip
        self.settings = settings
        self.pub: Publisher | None = None
        self.sub: Chan | None = None
        self._acker: Acker | None = None
        self._ready = asyncio.Event()  # up and every channel open
        self._consumers: list[ConsumerSpec] = []
        self._tags: dict[str, ConsumerSpec] = {}
        self.topology = Topology(lambda: self.conn, lambda: self.down_reason)
        self.on_down: Callable[[str], None] | None = None
        #: called with (kind, cause) for what the broker did that is no failure: a
        #: consumer cancelled, connection.blocked / unblocked
        self.on_event: Callable[[str, str], None] | None = None

    # -- state ---------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def ready_publisher(self, decl: ExchangeDecl | None) -> Publisher | None:
        """The open publisher when it needs no wait and ``decl`` is declared, else None.

        What :meth:`publisher` and :meth:`declare_exchange` give at once in the steady
        state, without two coroutines per message.
        """
        if self.pub is None or not self._ready.is_set():
            return None
        if decl is not None and decl not in self.topology.declared:
            return None
        return self.pub

    async def publisher(self, wait: float | None) -> Publisher:
        """The open publisher, waiting up to ``wait`` s (None: forever) for recovery."""
        if self._ready.is_set() and self.pub is not None:
            return self.pub
        if self.closing:
            raise ConnectionLost("transport is closed")
        try:
            async with asyncio.timeout(wait):
                while not (self._ready.is_set() and self.pub is not None):
                    await self._ready.wait()
                    if self.closing:
                        raise ConnectionLost("transport is closed")
        except TimeoutError as exc:
            raise ConnectionLost(
                f"no broker connection for {wait:g}s: {self.down_reason} "
                f"(tried {', '.join(mask(u) for u in self.urls)}; {amqp.BROKER_HINT})"
            ) from exc
        assert self.pub is not None
        return self.pub

    # -- connecting ----------------------------------------------------------

    def is_open(self, conn: AsyncioConnection) -> bool:
        return bool(conn.is_open)

    def explain(self, url: str, exc: BaseException, timeout: float) -> str:
        if isinstance(exc, ValueError):  # from urls.parameters: a URL pika cannot use
            return f"invalid broker URL: {hide_secret(str(exc), url)}"
        return urls.describe_connect_error(exc, url)

    async def shut(self, conn: AsyncioConnection) -> None:
        bridge.abort(conn)

    async def open(self, url: str, timeout: float) -> AsyncioConnection:
        i = self.urls.index(url)
        params = urls.parameters(url, self.settings, self.name, timeout)
        conn = await bridge.connect(params, timeout)
        try:
            conn.add_on_close_callback(self._on_conn_closed)
            conn.add_on_connection_blocked_callback(self._on_blocked)
            conn.add_on_connection_unblocked_callback(self._on_unblocked)
            if not conn.is_open:
                raise Gone("closed right after opening")
            self.conn = conn
            self.index = i
            async with asyncio.timeout(timeout):
                await self._setup(conn)
        except BaseException:
            if self.conn is conn:
                self.conn = None
            bridge.abort(conn)
            raise
        self._ready.set()
        return conn

    async def _setup(self, conn: AsyncioConnection) -> None:
        loop = asyncio.get_running_loop()
        pub_chan = await Chan.open(conn)
        pub = Publisher(pub_chan, self.settings.confirms)
        await pub.enable()
        pub_chan.add_on_close(self._on_pub_closed)
        sub = await Chan.open(conn)
        if self.settings.acked and self.settings.prefetch:
            prefetch = self.settings.prefetch
            await sub.call(sub.channel.basic_qos, prefetch_count=prefetch)
        sub.channel.add_on_cancel_callback(self._on_cancelled)
        sub.add_on_close(self._on_sub_closed)
        self.pub, self.sub = pub, sub
        self._acker = Acker(sub.channel, loop)
        self.topology.reset()
        self._tags.clear()
        for spec in self._consumers:
            await self._subscribe(spec)

    # -- failures --------------------------------------------------------------

    def _event(self, kind: str, cause: str) -> None:
        if self.on_event is not None and not self.closing:
            self.on_event(kind, cause)

    def _on_blocked(self, _conn: AsyncioConnection, frame: Method) -> None:
        self._event("blocked", blocking(True, getattr(frame.method, "reason", "")))

    def _on_unblocked(self, _conn: AsyncioConnection, _frame: Method) -> None:
        self._event("unblocked", blocking(False))

    def _on_conn_closed(self, conn: AsyncioConnection, reason: BaseException) -> None:
        if conn is not self.conn:
            return
        detail = hide_secret(repr(reason), self.urls[self.index])
        self.lost(detail, conn)  # reported, and reconnected from the next URL, if it was up
        self.conn = None
        self._mark_down(f"connection to {self.url} lost: {detail}")

    def _mark_down(self, reason: str) -> None:
        self._ready.clear()
        self.down_reason = reason
        gone = Gone(self.down_reason)
        if self.pub is not None:
            self.pub.fail_all(gone)
        self.pub = self.sub = None
        self.topology.drop_channel()
        self._acker = None
        if self.on_down is not None:
            self.on_down(self.down_reason)

    def _on_pub_closed(self, chan: Chan, reason: Gone) -> None:
        if self.pub is None or self.pub.chan is not chan:
            return
        self.pub.fail_all(reason)
        self.pub = None
        self._ready.clear()
        # an exchange that vanished (auto-deleted) must be declared again
        self.topology.declared.clear()
        conn = self.conn
        if conn is not None and conn.is_open and self.up and not self.closing:
            self.tasks.start(self._reopen_pub(conn), f"{self.name} publish channel reopening")

    async def _reopen_pub(self, conn: AsyncioConnection) -> None:
        try:
            chan = await Chan.open(conn)
            pub = Publisher(chan, self.settings.confirms)
            await pub.enable()
        except Gone:
            return  # the connection is going too: recovery takes over
        except Exception as exc:
            # sends would wait forever on a half-open link: start over instead
            bridge.abort(conn)
            raise DriverError(f"cannot reopen the publish channel ({exc!r}); reconnecting") from exc
        if conn is not self.conn or not self.up:
            chan.close()
            return
        chan.add_on_close(self._on_pub_closed)
        self.pub = pub
        if self.sub is not None:
            self._ready.set()

    def _on_sub_closed(self, chan: Chan, reason: Gone) -> None:
        if chan is not self.sub or self.closing or not reason.by_broker:
            return
        # consumers, pending acks and the reply queue all lived on it: start over,
        # on the next node like any other failure
        if self.conn is not None:
            self.kick(self.generation, f"the broker closed the consumer channel ({reason.text})")

    def _on_cancelled(self, frame: Method) -> None:
        spec = self._tags.pop(frame.method.consumer_tag, None)
        if spec is not None and self.up and not self.closing:
            self._event("consumer_cancelled", f"the broker cancelled the consumer of "
                        f"{spec.queue.name!r}; consuming again")  # fmt: skip
            self.tasks.start(self._resubscribe(spec), f"{self.name} consuming again")

    async def _resubscribe(self, spec: ConsumerSpec) -> None:
        with contextlib.suppress(Gone, DriverError):
            await self._subscribe(spec)

    # -- topology ------------------------------------------------------------

    async def declare_exchange(self, decl: ExchangeDecl) -> None:
        """Declare ``decl`` once per connection (see :class:`Topology`)."""
        await self.topology.declare_exchange(decl)

    async def _subscribe(self, spec: ConsumerSpec) -> None:
        for decl in spec.exchanges:
            await self.topology.declare_exchange(decl)
        await self.topology.declare_queue(spec.queue)
        sub, acker = self.sub, self._acker
        if sub is None or acker is None:
            raise Gone(self.down_reason)
        frame = await sub.call(
            sub.channel.basic_consume, spec.queue.name, acking(spec, acker), auto_ack=not spec.ack
        )
        self._tags[frame.method.consumer_tag] = spec

    async def consume(self, specs: Sequence[ConsumerSpec]) -> None:
        """Declare and consume ``specs`` now and after every reconnection."""
        wait = None if self.settings.retry is None else self.settings.connect_timeout
        for spec in specs:
            await self.publisher(wait)  # i.e. wait until the link is up
            try:
                await self._subscribe(spec)
            except Gone as exc:
                if exc.by_broker:
                    raise DriverError(
                        f"cannot consume from queue {spec.queue.name!r}: the broker refused "
                        f"({exc.text}); delete the queue or exchange if it exists with other "
                        "arguments (durable, auto-delete, exclusive)"
                    ) from exc
                raise ConnectionLost(
                    f"connection lost while setting up queue {spec.queue.name!r}: {exc.text}"
                ) from exc
            self._consumers.append(spec)

    # -- closing -------------------------------------------------------------

    async def aclose(self, timeout: float = 5.0) -> None:
        """Close channels and connection within ``timeout``; never raises."""
        self.closing = True
        self._ready.set()  # wake waiters: they see closing and give up
        await self.tasks.aclose()
        conn = self.conn
        if conn is None or not conn.is_open:
            self._finish()
            return
        loop = asyncio.get_running_loop()
        closed: asyncio.Future[None] = loop.create_future()
        conn.add_on_close_callback(lambda _c, _r: bridge.resolve(closed, None))
        try:
            async with asyncio.timeout(timeout):
                sub = self.sub
                if sub is not None:
                    # consumers go first, or the queues are in use and stay
                    await sub.aclose()
                with contextlib.suppress(Gone):
                    await self.topology.delete_declared()
                bridge.abort(conn)
                await closed
        except Exception as exc:  # noqa: BLE001 - aclose never raises
            LOG.debug("closing %s: %r", self.url, exc)
            bridge.abort(conn)
        self._finish()

    def _finish(self) -> None:
        if self.pub is not None:
            self.pub.fail_all(Gone("transport closed"))
        self.conn = None
        self.pub = self.sub = None
        self.topology.drop_channel()
        self._acker = None
        self.up = False
