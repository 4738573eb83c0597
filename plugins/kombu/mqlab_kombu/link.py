"""One AMQP connection that heals itself: the SDK's link on aio-pika.

aio-pika's plain :class:`aio_pika.Connection` is used on purpose rather than its
robust connection: the plugin needs to know *which* connection a failure
happened on (a generation number) to decide whether a publish was lost with
its connection, and it restores its own consumers in a fixed order
(:class:`mqlab.sdk.link.Link` runs the reconnection, reports it and counts generations).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aio_pika
from aio_pika.abc import AbstractConnection
from aio_pika.exceptions import CONNECTION_EXCEPTIONS

from mqlab.sdk import link
from mqlab.sdk.backoff import Backoff
from mqlab.sdk.lifecycle import blocking
from mqlab.sdk.urls import hide_secret
from mqlab.transport import Transport
from mqlab_kombu.errors import InvalidUrl, check_url, describe_connect_error

#: a bounded connect per URL: start() must fail fast when the broker is down
CONNECT_TIMEOUT = 5.0
#: the whole of start() across every URL of the list
START_BUDGET = 10.0
#: reconnect back-off: first attempt at once, then doubling up to the cap
BACKOFF = Backoff(first=0.5, cap=10.0)
CLOSE_TIMEOUT = 2.0


class Link(link.Link[AbstractConnection]):
    """A named aio-pika connection to the first reachable broker of ``urls``."""

    gone = (*CONNECTION_EXCEPTIONS, TimeoutError)

    def __init__(self, transport: Transport, urls: tuple[str, ...], name: str, heartbeat: int):
        super().__init__(
            transport, urls, name, per_url=CONNECT_TIMEOUT, budget=START_BUDGET, backoff=BACKOFF
        )
        self._heartbeat = heartbeat

    async def open(self, url: str, timeout: float) -> AbstractConnection:
        invalid = check_url(url)
        if invalid is not None:
            raise InvalidUrl(invalid)
        try:
            conn = await aio_pika.connect(
                url,
                timeout=timeout,
                heartbeat=self._heartbeat,
                client_properties={"connection_name": self.name},
            )
        except asyncio.CancelledError:
            # aio-pika cancels its own connect on a timeout: only a real cancel goes on
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            raise TimeoutError from None
        conn.close_callbacks.add(self._on_close)
        self._hear_blocking(conn)
        return conn

    def _hear_blocking(self, conn: AbstractConnection) -> None:
        """Tell the core when the broker blocks and unblocks this connection (a memory or disk
        alarm): the management API shows a short alarm on one tick or none, the frame exactly.
        aiormq handles both frames itself and offers no callback, so its two handlers are
        wrapped on this one connection; an aiormq without them is left as it is."""
        amqp = conn.transport.connection if conn.transport is not None else None
        for kind, attr in (("blocked", "_Connection__handle_connection_blocked"),
                           ("unblocked", "_Connection__handle_connection_unblocked")):  # fmt: skip
            handle = getattr(amqp, attr, None)
            if handle is not None:
                setattr(amqp, attr, self._telling(kind, handle))

    def _telling(
        self, kind: str, handle: Callable[[Any], Awaitable[None]]
    ) -> Callable[[Any], Awaitable[None]]:
        async def told(frame: Any) -> None:
            why = blocking(kind == "blocked", getattr(frame, "reason", ""))
            self.transport.notice(kind, why, self.name)
            await handle(frame)

        return told

    def explain(self, url: str, exc: BaseException, timeout: float) -> str:
        return describe_connect_error(url, exc, timeout)

    def is_open(self, conn: AbstractConnection) -> bool:
        transport = conn.transport
        return transport is not None and not transport.connection.is_closed

    async def shut(self, conn: AbstractConnection) -> None:
        await conn.close()

    def _on_close(self, sender: object, exc: BaseException | None = None) -> None:
        # aio-pika calls this for every connection we made; the base minds only the current
        why = hide_secret(repr(exc), self.urls[self.index]) if exc else "closed"
        if isinstance(sender, AbstractConnection):
            self.lost(why, sender)
