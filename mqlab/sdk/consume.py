"""A consumer loop that outlives its connection: read, handle, and when the connection is
lost say so, back off, reconnect, say it is back, read on.

What every driver's reader writes around its library, once: a blocking read with a timeout
(the server wakes it) or a poll (ask, and when nothing came wait, or less when something
says to read now), each message handled in order, and a lost connection reported in the one
wording (:func:`mqlab.sdk.lifecycle.connection_lost`) and a ``reconnected`` notice once it
is back, so a step's losses are explained by its timeline. Run it as one of the transport's
:class:`~mqlab.sdk.lifecycle.Tasks`: an error that is not the connection's ends it, reported.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from mqlab.sdk.backoff import BACKOFF, Backoff
from mqlab.sdk.lifecycle import connection_lost
from mqlab.sdk.urls import mask
from mqlab.transport import Transport

M = TypeVar("M")


async def consume(
    transport: Transport,
    receive: Callable[[], Awaitable[Iterable[M]]],
    handle: Callable[[M], Awaitable[object] | None],
    *,
    url: str,
    what: str,
    lost: tuple[type[BaseException], ...],
    reconnect: Callable[[], Awaitable[object]],
    poll: float = 0.0,
    wake: asyncio.Event | None = None,
    backoff: Backoff = BACKOFF,
) -> None:
    """Read with ``receive()`` and ``handle`` each message, until cancelled.

    ``receive()`` returns what arrived: it waits itself (wake-up: a blocking read with a
    timeout), or returns at once, maybe nothing; then the loop waits ``poll`` seconds, or
    until ``wake`` is set (poll). ``handle(message)`` (ack, reply) may be a coroutine.
    An error of ``lost`` from either is the connection's: it is reported as ``"<what> to
    <url> lost: <why>; reconnecting"``, then ``reconnect()`` is tried after each pause of
    ``backoff`` until it returns, and a ``reconnected`` notice names ``what``.
    """
    while True:
        try:
            count = 0
            for message in await receive():
                count += 1
                done = handle(message)
                if done is not None:
                    await done
        except lost as exc:
            await recover(transport, exc, url=url, what=what, lost=lost, reconnect=reconnect,
                          backoff=backoff)  # fmt: skip
            continue
        if not count and poll:
            await _pause(poll, wake)


async def recover(
    transport: Transport,
    why: object,
    *,
    url: str,
    what: str,
    lost: tuple[type[BaseException], ...],
    reconnect: Callable[[], Awaitable[object]],
    backoff: Backoff = BACKOFF,
) -> None:
    """Report ``what``'s connection to ``url`` lost for ``why``, then ``reconnect()`` after
    each pause of ``backoff`` until it returns (an error of ``lost``: the next pause), then
    notice ``reconnected``."""
    connection_lost(transport, url, why, what, connection=what)
    async for _ in backoff.attempts():
        try:
            await reconnect()
        except lost:
            continue
        transport.notice("reconnected", f"{what} reconnected to {mask(url)}", what)
        return


async def _pause(seconds: float, wake: asyncio.Event | None) -> None:
    if wake is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await wake.wait()
    wake.clear()
