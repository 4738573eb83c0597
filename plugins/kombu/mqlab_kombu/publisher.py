"""Publishing as oslo's kombu driver does it: declare, publish, confirm, retry.

A small pool of channels on one link takes the publishes round robin so
concurrent senders do not queue behind one channel's write lock. Every
exchange is declared (idempotently, with the topology's arguments) on a channel
before the first publish through it, so a publish never hits a missing exchange.

``retry`` follows oslo.messaging: ``None`` or ``-1`` republishes forever, ``0``
never (the first failure raises :class:`ConnectionLost`), ``N`` at most N
times. A publish whose confirm did not arrive before its connection died is
republished: the broker may have taken it, so duplicates are possible and
mqlab counts them. Nothing is hidden: a publish that is given up raises.

Where this differs from oslo: for :data:`SETTLE_S` seconds after its connection came back,
a publish to an exchange that ``retry`` promises to keep (confirms on, ``retry`` not 0) goes
out mandatory, and one the broker returns as unroutable is published again after a pause.
A restarted RabbitMQ has lost every non-durable queue until its consumer declares it again;
oslo publishes without the flag, so a cast resent in that gap is dropped unheard, breaking
the promise (the kit's restart check finds it in oslo.messaging). One still returned when
the window ends raises :class:`Undeliverable`: told, never silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import math
import time
from dataclasses import dataclass, field

import aio_pika
import aiormq.exceptions as amqp_exc
from aio_pika.abc import AbstractChannel, AbstractExchange
from aiormq.abc import DeliveredMessage

from mqlab.errors import ConnectionLost, DriverError, Undeliverable
from mqlab.sdk import amqp
from mqlab.sdk.amqp import Declared, ExchangeDecl
from mqlab_kombu.errors import describe, is_transient
from mqlab_kombu.link import CLOSE_TIMEOUT, Link

#: oslo's reconnect pacing (rabbit_retry_interval=1, rabbit_retry_backoff=2, max 30 s)
_WAIT_FIRST = 1.0
_WAIT_STEP = 2.0
_WAIT_MAX = 30.0
#: channel re-opens per publish that cost no attempt (nothing had been sent)
_FREE_REOPENS = 3
#: seconds after a reconnect in which publishes go mandatory and a returned one is held:
#: oslo's longest reconnect pause, time for every consumer to declare its queue again
SETTLE_S = 30.0
#: pause before a returned message is published again
_RETURN_PAUSE = 0.1


class _NotConnected(ConnectionError):
    """The link is between connections; transient like a dropped socket."""


@dataclass(eq=False)
class _Slot:
    """One publishing channel and the exchanges declared on it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    channel: AbstractChannel | None = None
    generation: int = -1
    exchanges: dict[str, AbstractExchange] = field(default_factory=dict)


class Publisher:
    """Publishes on ``link`` through ``channels`` channels, with confirms and retry."""

    def __init__(
        self, link: Link, channels: int, confirm: bool, retry: int | None, declared: Declared
    ) -> None:
        self._link = link
        self._confirm = confirm
        self._retry = retry
        self._max_retries = math.inf if retry is None or retry < 0 else retry
        self._slots = [_Slot() for _ in range(max(1, channels))]
        self._next_slot = itertools.cycle(self._slots).__next__
        #: what this transport declared: deleted at close
        self._declared = declared

    async def _ready_slot(self, slot: _Slot) -> AbstractChannel:
        channel = slot.channel
        if (
            channel is not None
            and slot.generation == self._link.generation
            and not channel.is_closed
        ):
            return channel
        async with slot.lock:
            channel = slot.channel
            generation = self._link.generation
            if channel is not None and slot.generation == generation and not channel.is_closed:
                return channel
            conn = self._link.connection
            if conn is None:
                raise _NotConnected("not connected to the broker (reconnecting)")
            channel = await conn.channel(publisher_confirms=self._confirm)
            slot.channel, slot.generation, slot.exchanges = channel, generation, {}
            return channel

    async def _exchange(self, slot: _Slot, decl: ExchangeDecl | None) -> AbstractExchange:
        channel = await self._ready_slot(slot)
        if decl is None:
            return channel.default_exchange
        exchange = slot.exchanges.get(decl.name)
        if exchange is None:
            exchange = await channel.declare_exchange(
                decl.name, decl.type, durable=decl.durable, auto_delete=decl.auto_delete
            )
            slot.exchanges[decl.name] = exchange
            self._declared.exchange(decl)
        return exchange

    async def publish(
        self, decl: ExchangeDecl | None, routing_key: str, message: aio_pika.Message
    ) -> None:
        """Publish ``message``; ``decl`` None means the default exchange (replies).

        Returns once the broker confirmed it (or once written, without confirms).
        Raises :class:`ConnectionLost` when the retries are spent, :class:`Undeliverable`
        when a message held after a reconnect is still unroutable as the window ends, and
        :class:`DriverError` when the broker refuses the message or the exchange.
        """
        attempt = 0
        redeclared = False
        reopened = 0
        returned = False  # once returned, a message goes mandatory until it is routed
        where = f"exchange {decl.name!r}" if decl is not None else f"reply queue {routing_key!r}"
        while True:
            slot = self._next_slot()
            generation = self._link.generation
            try:
                exchange = await self._exchange(slot, decl)
                generation = slot.generation
                held = decl is not None and (returned or self._settling())
                result: object = await exchange.publish(message, routing_key, mandatory=held)
            except amqp_exc.ChannelNotFoundEntity as exc:
                # an auto-delete exchange went away with its last binding; the broker
                # refused this publish, so declaring again and resending cannot duplicate
                if redeclared or decl is None:
                    raise DriverError(f"publish to {where} failed: {describe(exc)}") from exc
                redeclared = True
                for other in self._slots:
                    other.exchanges.pop(decl.name, None)
                continue
            except amqp_exc.DeliveryError as exc:
                raise DriverError(
                    f"the broker refused a message for {where} ({describe(exc)})"
                ) from exc
            except asyncio.CancelledError as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
                # aiormq cancels pending confirms when their channel dies under them
                failure: BaseException = exc
            except amqp_exc.ChannelInvalidStateError as exc:
                # raised before anything is written: the channel died (e.g. the broker
                # closed it after an error) while the connection may be fine
                if reopened < _FREE_REOPENS and self._link.alive(generation):
                    reopened += 1
                    continue
                failure = exc
            except Exception as exc:
                if not is_transient(exc):
                    raise DriverError(f"publish to {where} failed: {describe(exc)}") from exc
                failure = exc
            else:
                if not isinstance(result, DeliveredMessage):
                    return
                # returned: no queue bound (yet); nothing was lost, so no attempt is spent
                returned = True
                if not self._settling():
                    raise Undeliverable(
                        f"nobody listens on {where} (routing key {routing_key!r}): the broker "
                        f"returned the message for {SETTLE_S:g} s after the connection came "
                        "back; start a server for it"
                    )
                await asyncio.sleep(_RETURN_PAUSE)
                continue
            if attempt >= self._max_retries:
                spent = (
                    "not republished"
                    if attempt == 0
                    else f"gave up after {attempt} republish{'es' if attempt > 1 else ''}"
                )
                raise ConnectionLost(
                    f"publish to {where} failed: {describe(failure)} (retry={self._retry}: {spent})"
                ) from failure
            attempt += 1
            await self._recover(generation, attempt, where)

    def _settling(self) -> bool:
        """Whether a publish now goes out mandatory: retry keeps it, and the connection
        replaced a lost one less than :data:`SETTLE_S` seconds ago."""
        link = self._link
        return (
            self._confirm
            and self._max_retries > 0
            and link.generation > 1
            and time.monotonic() - link.up_since < SETTLE_S
        )

    async def _recover(self, generation: int, attempt: int, where: str) -> None:
        if self._link.alive(generation):
            # only the channel died (the connection is fine): the slot reopens it;
            # the pause keeps a persistent channel failure from spinning the loop
            await asyncio.sleep(0.01)
            return
        wait = None
        if self._max_retries != math.inf:
            wait = min(_WAIT_FIRST + _WAIT_STEP * (attempt - 1), _WAIT_MAX)
        # a timeout here is one spent attempt; the loop tries (and counts) again
        await self._link.wait_newer(generation, wait)
        if self._link.closing:
            raise ConnectionLost(f"publish to {where} abandoned: the transport is closing")

    async def delete_declared(self) -> None:
        """Delete the non-durable queues and exchanges this transport declared, if unused.

        oslo's topology auto-deletes nothing but the fanout exchange, so what a
        run declared would stay on the broker; ``if_unused`` keeps every queue
        someone still consumes and every exchange something still binds.
        """
        conn = self._link.connection
        if conn is None or not self._declared.deletions():
            return
        # 406 in use: another worker still consumes or binds it and deletes it last
        refused = (amqp_exc.AMQPError, amqp_exc.ChannelInvalidStateError, OSError)
        fresh = functools.partial(conn.channel, publisher_confirms=False)
        channel = await amqp.delete_unused(fresh, self._declared, refused)
        if channel is not None and not channel.is_closed:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await channel.close()
