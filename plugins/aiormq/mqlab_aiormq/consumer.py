"""A server-side consumer: one channel, its queues, the handler, replies and acks.

Acking with ``multi_ack = N > 1`` sends one ``basic.ack(multiple=True)`` for
every N processed deliveries, and a short timer acks a partial batch once the
consumer goes idle, so nothing stays unacked forever. That is only correct if
deliveries are *processed* in delivery-tag order: aiormq starts one task per
delivery, in order, and the handler runs synchronously before the task's first
``await``, so recording a processed tag right after the handler keeps the order.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiormq
from aiormq.abc import DeliveredMessage
from pamqp.commands import Basic

from mqlab.sdk.amqp import DEFAULT_EXCHANGE
from mqlab.transport import Handler

#: how long a partial ack batch may wait for more deliveries before it is acked
ACK_LINGER = 0.02
#: bound on each step of stop() (cancel, final ack, channel close)
STOP_TIMEOUT = 2.0

_Properties = Basic.Properties


class Consumer:
    """Consumes queues on its own channel and runs ``handler`` for each delivery.

    A handler's non-``None`` result is published to the request's ``reply_to``
    queue through the default exchange with the request's ``correlation_id``.
    """

    __slots__ = (
        "_ack_every",
        "_acking",
        "_channel",
        "_flush_task",
        "_force",
        "_handler",
        "_last",
        "_loop",
        "_no_ack",
        "_pending",
        "_stopping",
        "_tags",
        "_timer",
    )

    def __init__(
        self, channel: aiormq.Channel, handler: Handler, *, no_ack: bool, multi_ack: int
    ) -> None:
        self._channel = channel
        self._handler = handler
        self._no_ack = no_ack
        self._ack_every = 0 if no_ack else multi_ack
        self._loop = asyncio.get_running_loop()
        self._tags: list[str] = []
        self._stopping = False
        # multi-ack state: highest processed tag, processed-but-unacked count
        self._last = 0
        self._pending = 0
        self._acking = False
        self._force = False
        self._timer: asyncio.TimerHandle | None = None
        self._flush_task: asyncio.Task[None] | None = None

    @property
    def channel(self) -> aiormq.Channel:
        return self._channel

    async def consume(self, queue: str) -> None:
        """Start consuming ``queue``; returns once the broker confirmed the consumer."""
        ok = await self._channel.basic_consume(queue, self._on_message, no_ack=self._no_ack)
        if ok.consumer_tag:
            self._tags.append(ok.consumer_tag)

    async def _on_message(self, message: DeliveredMessage) -> None:
        failure: Exception | None = None
        try:
            result = self._handler(message.body)
        except Exception as exc:  # noqa: BLE001 - any handler bug: ack it anyway, re-raise below
            failure, result = exc, None
        every = self._ack_every
        flush = False
        # a consumer only gets basic.deliver, whose tag is always set
        tag: int = message.delivery.delivery_tag  # type: ignore[union-attr, assignment]
        if every > 1:
            # synchronous, before any await: tags are recorded in delivery order
            self._last = tag
            self._pending += 1
            if self._pending >= every:
                flush = True
            elif self._timer is None:
                self._timer = self._loop.call_later(ACK_LINGER, self._on_linger)
        try:
            if result is not None:
                props = message.header.properties
                reply_to = props.reply_to
                if reply_to:
                    cid = props.correlation_id
                    await self._channel.basic_publish(
                        result,
                        exchange=DEFAULT_EXCHANGE,
                        routing_key=reply_to,
                        properties=_Properties(correlation_id=cid, message_id=cid),
                        wait=False,
                    )
            if every == 1:
                await self._channel.basic_ack(tag, wait=False)
            elif flush:
                await self._flush(force=False)
        except Exception:
            if self._stopping:  # the channel closed under an in-flight delivery: expected
                return
            raise
        if failure is not None:
            raise failure

    async def _flush(self, force: bool) -> None:
        """Ack everything processed so far with one multiple ack (or a few, under load).

        Only one flush sends at a time: two concurrent multiple-acks could reach
        the socket out of order, and acking a tag twice closes the channel.
        """
        if self._acking:
            self._force = self._force or force
            return
        self._acking = True
        try:
            while self._pending and (force or self._pending >= self._ack_every):
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                tag, self._pending = self._last, 0
                await self._channel.basic_ack(tag, multiple=True, wait=False)
                force, self._force = self._force, False
        finally:
            self._acking = False
        if self._pending and self._timer is None:
            self._timer = self._loop.call_later(ACK_LINGER, self._on_linger)

    def _on_linger(self) -> None:
        self._timer = None
        if self._pending:
            self._flush_task = self._loop.create_task(self._flush_quietly())

    async def _flush_quietly(self) -> None:
        # a timer-driven flush has nobody to report to; a closed channel ends it
        with contextlib.suppress(Exception):
            await self._flush(force=True)

    def abandon(self) -> None:
        """Its connection is gone: what it had in flight fails quietly, nothing is acked
        (the broker delivers the unacked again, to the consumer that replaces this one)."""
        self._stopping = True
        self._pending = 0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def stop(self) -> None:
        """Cancel the consumers, ack what was processed, close the channel. Never raises."""
        channel = self._channel
        self._stopping = True
        for tag in self._tags:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(channel.basic_cancel(tag), STOP_TIMEOUT)
        # deliveries that arrived before cancel-ok already have their tasks: let
        # them run their handler (so their tags count below) and send their reply
        for _ in range(3):
            await asyncio.sleep(0)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for _ in range(100):  # an in-flight flush must reach the socket before close
            if not self._acking:
                break
            await asyncio.sleep(0.001)
        if self._pending and not channel.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._flush(force=True), STOP_TIMEOUT)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(channel.close(), STOP_TIMEOUT)
