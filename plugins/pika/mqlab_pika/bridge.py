"""pika's callbacks as asyncio futures: open a connection, open a channel, await a method.

pika's asyncio adapter runs every callback on the event loop, so a callback can
resolve a future directly; no thread is involved anywhere.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import pika.exceptions
from pika.adapters.asyncio_connection import AsyncioConnection
from pika.channel import Channel
from pika.connection import Parameters

_NO_EXCHANGE = re.compile(r"no exchange '(.*)' in vhost")


class Gone(Exception):
    """The channel or connection closed before an operation completed (internal).

    ``code``/``text`` are the broker's reply when it closed the channel on
    purpose (404, 406, ...); ``code`` is None when the connection went away.
    """

    def __init__(self, text: str, code: int | None = None) -> None:
        super().__init__(text)
        self.code = code
        self.text = text

    @property
    def by_broker(self) -> bool:
        return self.code is not None

    @property
    def missing_exchange(self) -> str | None:
        """The exchange a 404 NOT_FOUND named, if that is why the channel closed."""
        if self.code != 404:
            return None
        found = _NO_EXCHANGE.search(self.text)
        return found.group(1) if found else None

    @classmethod
    def from_reason(cls, reason: BaseException | None) -> Gone:
        if isinstance(reason, pika.exceptions.ChannelClosedByBroker):
            return cls(f"{reason.reply_code} {reason.reply_text}", reason.reply_code)
        if isinstance(reason, pika.exceptions.ChannelClosed):
            return cls(f"channel closed: {reason.reply_text}")
        if reason is None:
            return cls("closed")
        return cls(str(reason) or type(reason).__name__)


def resolve(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def fail(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


async def connect(params: Parameters, timeout: float) -> AsyncioConnection:
    """Open one connection; raise pika's error (or TimeoutError) when it fails.

    pika bounds the attempt with ``params.stack_timeout``; the asyncio timeout is
    a backstop in case a callback never comes.
    """
    loop = asyncio.get_running_loop()
    opened: asyncio.Future[AsyncioConnection] = loop.create_future()
    conn = AsyncioConnection(
        params,
        on_open_callback=lambda c: resolve(opened, c),
        on_open_error_callback=lambda _c, exc: fail(opened, exc),
        custom_ioloop=loop,
    )
    try:
        async with asyncio.timeout(timeout + 1.0):
            return await opened
    except BaseException:
        abort(conn)
        raise


def abort(conn: AsyncioConnection) -> None:
    """Start closing ``conn`` whatever its state; never raises."""
    try:
        if not (conn.is_closing or conn.is_closed):
            conn.close()
    except Exception:  # noqa: BLE001 - closing is best effort
        pass


class Chan:
    """A pika channel whose synchronous methods can be awaited.

    Every awaited operation fails with :class:`Gone` when the channel closes, so
    nothing waits for a reply that will never come.
    """

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.closed: BaseException | None = None
        self._waiters: set[asyncio.Future[Any]] = set()
        self._on_close: list[Callable[[Chan, Gone], None]] = []
        channel.add_on_close_callback(self._closed)

    @classmethod
    async def open(cls, conn: AsyncioConnection) -> Chan:
        loop = asyncio.get_running_loop()
        opened: asyncio.Future[None] = loop.create_future()
        try:
            channel = conn.channel(on_open_callback=lambda _ch: resolve(opened, None))
        except pika.exceptions.AMQPError as exc:
            raise Gone(f"cannot open a channel: {exc!r}") from exc
        chan = cls(channel)
        chan._waiters.add(opened)
        try:
            await opened
        finally:
            chan._waiters.discard(opened)
        return chan

    @property
    def is_open(self) -> bool:
        return bool(self.channel.is_open)

    def add_on_close(self, callback: Callable[[Chan, Gone], None]) -> None:
        """Call ``callback(chan, reason)`` once when the channel closes."""
        self._on_close.append(callback)

    def _closed(self, _channel: Channel, reason: BaseException) -> None:
        self.closed = reason
        gone = Gone.from_reason(reason)
        for fut in self._waiters:
            fail(fut, gone)
        self._waiters.clear()
        for callback in self._on_close:
            callback(self, gone)
        self._on_close.clear()

    async def call(self, method: Callable[..., object], *args: Any, **kwargs: Any) -> Any:
        """Run pika's ``method(*args, callback=..., **kwargs)`` and await that callback."""
        if not self.channel.is_open:
            raise Gone.from_reason(self.closed)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.add(fut)
        try:
            method(*args, callback=lambda frame: resolve(fut, frame), **kwargs)
            return await fut
        except pika.exceptions.AMQPError as exc:
            raise Gone(repr(exc)) from exc
        finally:
            self._waiters.discard(fut)

    def close(self) -> None:
        """Start closing; never raises."""
        try:
            if self.channel.is_open:
                self.channel.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass

    async def aclose(self) -> None:
        """Close and wait for the broker's close-ok (bound it with a timeout)."""
        if not self.channel.is_open:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._on_close.append(lambda _chan, _reason: resolve(fut, None))
        self.close()
        await fut
