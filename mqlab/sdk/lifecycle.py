"""What every transport with a connection writes and nothing driver-specific: its background
tasks, and telling the core about a connection its library lost and re-established.

``Tasks`` keeps a transport's long-lived tasks (readers, dispatchers, reply consumers): a task
that dies reports why through :meth:`~mqlab.transport.Transport.report` instead of vanishing
(the messages it would have read are then counted, not silently lost), and ``aclose()``
cancels and awaits every one within the contract's close limit. :func:`connection_lost` is the
one phrase for a lost connection, with the URL masked and its password scrubbed from the
library's reason; :func:`blocking` the one phrase for a connection the broker blocked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from mqlab.errors import ConnectionLost, DriverError, TransportError
from mqlab.sdk.urls import hide_secret, mask
from mqlab.transport import CLOSE_LIMIT, Transport


class Tasks:
    """A transport's background tasks, each failure reported, all stopped at close."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run ``work`` until it returns or ``aclose()``; an error it raises is reported as a
        :class:`~mqlab.errors.TransportError` naming ``name`` (a library error as a
        ``DriverError``)."""
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled() or (exc := task.exception()) is None:
            return
        if isinstance(exc, TransportError):
            self._transport.report(exc)
        else:
            self._transport.report(DriverError(f"{task.get_name()}: {type(exc).__name__}: {exc}"))

    def __len__(self) -> int:
        return len(self._tasks)

    async def aclose(self) -> None:
        """Cancel every task and wait for them (at most ``CLOSE_LIMIT`` seconds); never raises."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait(tasks, timeout=CLOSE_LIMIT)


async def close_all(
    *steps: Callable[[], Awaitable[object]], within: float = CLOSE_LIMIT - 1
) -> None:
    """A graceful close, bounded: each step in order (stop consuming, let the last handlers
    finish, delete what was declared, close the connection), all within ``within`` seconds.
    A step that fails or outlasts what is left is abandoned and the next still runs (with
    at least a moment of its own); never raises, as ``aclose()`` must not."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    for step in steps:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(max(deadline - loop.time(), 0.05)):
                await step()


def blocking(blocked: bool, reason: object = None) -> str:
    """The cause of a ``blocked`` or ``unblocked`` notice (AMQP ``connection.blocked`` /
    ``unblocked``: the broker stops or resumes reading a publishing connection), one wording
    for every plugin: ``reason`` is the broker's, e.g. "low on memory"."""
    if not blocked:
        return "the broker unblocked the connection"
    return f"the broker blocked the connection ({reason or 'no reason given'})"


def connection_lost(
    transport: Transport,
    url: str,
    why: object,
    what: str = "connection",
    again: bool = True,
    connection: str = "",
) -> ConnectionLost:
    """Report (and return) a lost connection: ``"<what> to <masked url> lost: <why>;
    reconnecting"`` (``again=False``: without the last word, for one that is not re-made).
    ``connection``: the driver's name for it (the connection name the broker shows), on the
    step's timeline beside the event."""
    text = f"{what} to {mask(url)} lost: {why}" + ("; reconnecting" if again else "")
    error = ConnectionLost(hide_secret(text, url))
    transport.report(error, connection)
    return error
