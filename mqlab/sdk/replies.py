"""A client's replies: one address of its own, read from its first call on, each reply
handed to the call waiting for it.

Every request/reply driver builds the same piece: a reply address unique to the client, a
reader started lazily (a client that only casts needs none), a correlation id per call, the
waiting-call table (:class:`~mqlab.sdk.pending.PendingCalls`) and the one timeout wording. The
reader is one of the transport's tasks; if it dies, the calls waiting fail at once and the
next call starts a new one (a reply address read by nobody is a call waiting for its
timeout).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from mqlab.errors import ConnectionLost
from mqlab.sdk.lifecycle import Tasks
from mqlab.sdk.pending import PendingCalls
from mqlab.transport import Target

Reader = Callable[["asyncio.Future[None]"], Coroutine[Any, Any, None]]


class Replies:
    """``address``: where servers send this client's replies; ``read(ready)``: the reader of
    it, which sets ``ready`` once it reads there (no request is sent before: a reply to an
    address nobody reads yet may be dropped) and hands each reply to :meth:`resolve`."""

    def __init__(self, tasks: Tasks, address: str, read: Reader) -> None:
        self.address = address
        self.pending = PendingCalls()
        self._tasks = tasks
        self._read = read
        self._reader: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None

    async def call(
        self, target: Target, timeout: float, send: Callable[[str], Awaitable[object]]
    ) -> bytes:
        """``send(correlation_id)`` the request, then the reply's body; the one CallTimeout
        after ``timeout`` seconds (sending included)."""
        if self._reader is None or self._reader.done():
            ready = self._ready = asyncio.get_running_loop().create_future()
            self._reader = self._tasks.start(self._read(ready), f"replies to {self.address}")
            self._reader.add_done_callback(self._ended)
        if self._ready is not None and not self._ready.done():
            await asyncio.wait({self._ready, self._reader}, return_when=asyncio.FIRST_COMPLETED)
        corr = uuid.uuid4().hex
        async with self.pending.waiting(corr, target, timeout) as reply:
            await send(corr)
            return await reply

    def resolve(self, corr: object, body: bytes) -> bool:
        """Hand a reply to its call (False: late, or not this client's)."""
        return self.pending.resolve(corr, body)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled():
            self.pending.reject_all(ConnectionLost(f"the reader of {self.address} stopped"))
        if self._ready is not None and not self._ready.done():
            self._ready.cancel()

    def close(self) -> None:
        """Fail every waiting call: the transport is closing."""
        self.pending.close()
