"""The consumer side of a link: what to consume, and acking deliveries in batches.

A :class:`ConsumerSpec` is kept by the link and consumed again after every
reconnection; :func:`acking` wraps its callback so each handled delivery is
acked through the channel's :class:`Acker`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import pika.spec
from pika.channel import Channel

from mqlab.sdk.amqp import ExchangeDecl, QueueDecl

OnMessage = Callable[[Channel, pika.spec.Basic.Deliver, pika.spec.BasicProperties, bytes], None]


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """A queue to declare, bind and consume, restored after every reconnection."""

    queue: QueueDecl
    exchanges: tuple[ExchangeDecl, ...]  # declared before the bindings
    on_message: OnMessage
    ack: bool


class Acker:
    """Acks a channel's deliveries in batches: one ``multiple`` ack per loop turn.

    Deliveries of one channel are handled in order and to completion, so when
    tag N is done every tag below it is done too.
    """

    __slots__ = ("_channel", "_loop", "_scheduled", "_tag")

    def __init__(self, channel: Channel, loop: asyncio.AbstractEventLoop) -> None:
        self._channel = channel
        self._loop = loop
        self._tag = 0
        self._scheduled = False

    def done(self, tag: int) -> None:
        self._tag = tag
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        if self._channel.is_open:
            self._channel.basic_ack(self._tag, multiple=True)


def acking(spec: ConsumerSpec, acker: Acker) -> OnMessage:
    """``spec``'s callback, followed by an ack when ``spec`` asks for acks."""
    on_message = spec.on_message
    if not spec.ack:
        return on_message
    done = acker.done

    def deliver(
        ch: Channel,
        method: pika.spec.Basic.Deliver,
        props: pika.spec.BasicProperties,
        body: bytes,
    ) -> None:
        on_message(ch, method, props, body)
        done(method.delivery_tag)

    return deliver
