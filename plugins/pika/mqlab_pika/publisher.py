"""Publishing on one channel, with publisher confirms and mandatory returns as futures.

With confirms on, the broker numbers every publish on the channel (1, 2, ...)
and later acks or nacks those numbers, one at a time or "up to N". A mandatory
message nobody's queue took comes back as basic.return *before* its ack; the
return carries the message's properties, so each mandatory publish is keyed by
its correlation_id (calls) or message_id (casts) and the return fails exactly
that publish.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pika.spec
from pika.channel import Channel
from pika.frame import Method

from mqlab_pika.bridge import Chan, Gone, fail, resolve


class Returned(Exception):
    """The broker returned a mandatory message: no queue was bound for it (internal)."""

    def __init__(self, code: int, text: str, exchange: str, routing_key: str) -> None:
        super().__init__(f"{code} {text}")
        self.code = code
        self.text = text
        self.exchange = exchange
        self.routing_key = routing_key


class Nacked(Exception):
    """The broker nacked a publish: it could not take responsibility for it (internal)."""


_Entry = tuple["asyncio.Future[None] | None", "str | None"]

#: pika buffers whatever is published until the socket takes it, without limit: a
#: publish that finds more than WRITE_HIGH bytes waiting waits until fewer than
#: WRITE_LOW are (asyncio's own stream defaults), as a blocking socket write would
WRITE_HIGH = 64 * 1024
WRITE_LOW = 16 * 1024
#: pika tells nobody when its buffer drains, so one poll per connection watches it
DRAIN_POLL = 0.001


def _nothing() -> int:
    return 0


class Publisher:
    """Publishes on ``chan``; with ``confirms`` each publish may get a future."""

    def __init__(self, chan: Chan, confirms: bool) -> None:
        self.chan = chan
        self.confirms = confirms
        self._channel: Channel = chan.channel
        self._loop = asyncio.get_running_loop()
        self._pending: dict[int, _Entry] = {}
        self._by_key: dict[str, int] = {}
        self._tag = 0  # the broker's number for the last publish
        self._low = 1  # lowest number that may still be pending
        # pika's own transport for this connection (what BlockingConnection reads too);
        # None once the connection is going: nothing more will be buffered then
        transport = getattr(chan.channel.connection, "_transport", None)
        self._buffered: Callable[[], int] = (
            transport.get_write_buffer_size if transport is not None else _nothing
        )
        self._drained: asyncio.Task[None] | None = None

    async def enable(self) -> None:
        """Switch the channel to confirm mode (if asked) and listen for returns."""
        self._channel.add_on_return_callback(self._on_return)
        if self.confirms:
            await self.chan.call(self._channel.confirm_delivery, self._on_confirm)

    @property
    def is_open(self) -> bool:
        return bool(self._channel.is_open)

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def full(self) -> bool:
        """pika holds more than :data:`WRITE_HIGH` bytes the socket has not taken yet."""
        return self._buffered() > WRITE_HIGH

    async def room(self) -> None:
        """Wait until pika's buffer is below :data:`WRITE_LOW` or the channel closed."""
        if self._drained is None:  # one watcher, however many publishes wait
            self._drained = self._loop.create_task(self._drain())
        await asyncio.shield(self._drained)

    async def _drain(self) -> None:
        try:
            while self.is_open and self._buffered() > WRITE_LOW:
                await asyncio.sleep(DRAIN_POLL)
        finally:
            self._drained = None

    def publish(
        self,
        exchange: str,
        routing_key: str,
        body: bytes,
        properties: pika.spec.BasicProperties,
        mandatory: bool = False,
        key: str | None = None,
        track: bool = True,
    ) -> asyncio.Future[None] | None:
        """Send one message; return a future for its confirm, or None if not tracked.

        ``key`` must be set for a tracked mandatory publish (its return is found by it).
        """
        try:
            self._channel.basic_publish(exchange, routing_key, body, properties, mandatory)
        except Exception as exc:
            raise Gone.from_reason(self.chan.closed or exc) from exc
        if not self.confirms:
            return None
        self._tag += 1
        if not track:
            self._pending[self._tag] = (None, None)
            return None
        fut: asyncio.Future[None] = self._loop.create_future()
        if mandatory and key is not None:
            self._pending[self._tag] = (fut, key)
            self._by_key[key] = self._tag
        else:
            self._pending[self._tag] = (fut, None)
        return fut

    def fail_all(self, exc: BaseException) -> None:
        """Fail every unconfirmed publish (the channel or connection went away)."""
        pending = self._pending
        self._pending = {}
        self._by_key.clear()
        for fut, _key in pending.values():
            if fut is not None:
                fail(fut, exc)

    def _settle(self, tag: int, nacked: bool) -> None:
        entry = self._pending.pop(tag, None)
        if entry is None:
            return
        fut, key = entry
        if key is not None:
            self._by_key.pop(key, None)
        if fut is not None and not fut.done():
            if nacked:
                fut.set_exception(Nacked(f"broker nacked publish #{tag}"))
            else:
                resolve(fut, None)

    def _on_confirm(self, frame: Method) -> None:
        method = frame.method
        nacked = isinstance(method, pika.spec.Basic.Nack)
        tag = method.delivery_tag
        if method.multiple:
            for number in range(self._low, tag + 1):
                self._settle(number, nacked)
            self._low = max(self._low, tag + 1)
        else:
            self._settle(tag, nacked)
            # keep _low at the first unsettled number so "multiple" stays cheap
            while self._low <= self._tag and self._low not in self._pending:
                self._low += 1

    def _on_return(
        self,
        _channel: Channel,
        method: pika.spec.Basic.Return,
        properties: pika.spec.BasicProperties,
        _body: bytes,
    ) -> None:
        key = properties.correlation_id or properties.message_id
        tag = self._by_key.pop(key, None) if key else None
        if tag is None:
            return
        entry = self._pending.get(tag)
        if entry is not None and entry[0] is not None:
            fail(
                entry[0],
                Returned(method.reply_code, method.reply_text, method.exchange, method.routing_key),
            )
