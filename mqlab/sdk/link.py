"""One connection that heals itself: connect, notice the loss, say so, reconnect, restore.

Every driver that keeps a connection open writes the same loop around its library: try the
URLs in order, watch for the connection closing, report it in one wording, wait a growing
pause, connect again (from the next URL: a cluster's fail-over), restore what lived on the
old connection (channels, consumers), say it is back. :class:`Link` is that loop; a plugin
subclasses it with its library's calls: :meth:`Link.open`, :meth:`Link.shut`,
:meth:`Link.is_open`, and calls :meth:`Link.lost` from its library's "closed" callback.

``generation`` grows by one with every connection, so a sender that failed on connection
``g`` waits for ``g + 1`` (:meth:`Link.wait_newer`) instead of retrying on a dead one.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from mqlab.errors import ConnectFailed, DriverError
from mqlab.sdk.backoff import BACKOFF, Backoff
from mqlab.sdk.connect import connect_first, explain, no_url
from mqlab.sdk.lifecycle import Tasks, connection_lost
from mqlab.sdk.urls import mask
from mqlab.transport import Transport

C = TypeVar("C")

#: seconds closing one connection may take (the transport's close limit bounds them all)
SHUT_WITHIN = 2.0


class Link(abc.ABC, Generic[C]):
    """A named connection ``C`` to the first reachable URL of ``urls``, reconnected forever.

    The transport hears of each loss (``report(ConnectionLost)``, one wording) and of each
    return (``notice("reconnected")``), both under the link's ``name``, which should be the
    connection name the broker shows.
    """

    #: the library's errors that mean the connection failed (restoring meets them too)
    gone: tuple[type[BaseException], ...] = (OSError, TimeoutError)

    def __init__(
        self,
        transport: Transport,
        urls: Sequence[str],
        name: str,
        *,
        per_url: float,
        budget: float | None = None,
        backoff: Backoff = BACKOFF,
    ) -> None:
        """``per_url``: seconds to open one URL; ``budget``: all of :meth:`start` (by default
        ``per_url`` each); ``backoff``: the pauses between reconnection rounds."""
        if not urls:
            raise no_url()
        self.transport = transport
        self.urls = tuple(urls)
        self.name = name
        self.per_url = per_url
        self.budget = budget
        self.backoff = backoff
        self.index = 0  # the URL in use, or last used
        self.conn: C | None = None
        self.generation = 0
        self.up = False
        self.up_since = 0.0  # time.monotonic() when the current connection came up
        self.closing = False
        self.down_reason = "not connected"
        self.tasks = Tasks(transport)
        self._hooks: list[Callable[[C], Awaitable[None]]] = []
        self._changed = asyncio.Condition()
        self._lost = asyncio.Event()

    # -- what a subclass writes ---------------------------------------------------------

    @abc.abstractmethod
    async def open(self, url: str, timeout: float) -> C:
        """Open one connection to ``url`` within ``timeout`` s (raise on failure)."""

    @abc.abstractmethod
    async def shut(self, conn: C) -> None:
        """Close ``conn`` (the base bounds it by :data:`SHUT_WITHIN` and ignores errors)."""

    def is_open(self, conn: C) -> bool:
        """True while ``conn`` is usable; the default trusts :meth:`lost` alone."""
        return True

    def explain(self, url: str, exc: BaseException, timeout: float) -> str:
        """Why opening ``url`` failed, in one clause without the password."""
        return explain(url, exc, timeout)

    async def restore(self, conn: C) -> None:
        """Make a new connection what the old one was: the hooks, in the order added."""
        for hook in self._hooks:
            await hook(conn)

    # -- state ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The URL in use, masked."""
        return mask(self.urls[self.index])

    @property
    def connection(self) -> C | None:
        """The current connection, None while reconnecting."""
        return self.conn if self.alive(self.generation) else None

    def alive(self, generation: int) -> bool:
        """True when connection ``generation`` is the current one and still open."""
        conn = self.conn
        return self.up and generation == self.generation and conn is not None and self.is_open(conn)

    def add_hook(self, hook: Callable[[C], Awaitable[None]]) -> None:
        """Run ``hook(connection)`` on every new connection, before it is announced."""
        self._hooks.append(hook)

    async def wait_up(self, timeout: float | None) -> bool:
        """Wait until a connection is up; False on timeout or close."""
        return await self._wait(lambda: self.up, timeout)

    async def wait_newer(self, generation: int, timeout: float | None) -> bool:
        """Wait until a connection newer than ``generation`` is up; False on timeout or close."""
        return await self._wait(lambda: self.up and self.generation > generation, timeout)

    async def _wait(self, ready: Callable[[], bool], timeout: float | None) -> bool:
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: self.closing or ready())
        except TimeoutError:
            return False
        return not self.closing

    async def _announce(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- connecting -----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the first URL that answers (:class:`ConnectFailed` naming each), then
        keep the link up until :meth:`aclose`."""
        self.index, self.conn = await self._connect(0, self.budget)
        self.generation, self.up = 1, True
        self.up_since = time.monotonic()
        self.tasks.start(self._supervise(), f"{self.name} reconnector")

    async def _connect(self, first: int, budget: float | None = None) -> tuple[int, C]:
        return await connect_first(
            self.urls, self.open, self.explain, per_url=self.per_url, budget=budget, start=first
        )

    def lost(self, why: object, conn: C | None = None) -> None:
        """The library says a connection closed (call it on the loop): when it is the current
        one and was up, report it and reconnect. ``conn``: which one (a replaced one's late
        close is ignored)."""
        if self.closing or not self.up or (conn is not None and conn is not self.conn):
            return
        self.up = False
        self.down_reason = f"connection to {self.url} lost: {why}"
        connection_lost(
            self.transport, self.urls[self.index], why, f"{self.name} connection",
            connection=self.name,
        )  # fmt: skip
        self._lost.set()

    def kick(self, generation: int, why: str) -> None:
        """Give up connection ``generation`` (something on it broke for good): reconnect."""
        if generation == self.generation:
            self.lost(why)

    async def _supervise(self) -> None:
        while not self.closing:
            await self._lost.wait()
            self._lost.clear()
            await self._announce()  # waiters see the link down
            if self.conn is not None:
                await self._shut(self.conn)
            await self._reconnect()

    async def _reconnect(self) -> None:
        first = (self.index + 1) % len(self.urls)  # the next node first: fail over
        async for _ in self.backoff.attempts():
            if self.closing:
                return
            try:
                index, conn = await self._connect(first)
            except ConnectFailed as exc:
                self.down_reason = str(exc)
                continue
            self.index, self.conn = index, conn
            self.generation += 1
            if not await self._restored(conn):
                await self._shut(conn)
                continue
            self._lost.clear()  # the replaced connections' closes are stale now
            self.up, self.up_since = True, time.monotonic()
            await self._announce()
            self.transport.notice("reconnected", f"reconnected to {self.url}", self.name)
            return

    async def _restored(self, conn: C) -> bool:
        try:
            await self.restore(conn)
        except self.gone:
            return False  # the new connection broke while restoring: start over
        except Exception as exc:  # noqa: BLE001 - not the connection: said, and healed on
            self.transport.report(
                DriverError(f"{self.name}: restoring after a reconnection failed: {exc!r}"),
                self.name,
            )
            return False
        return self.is_open(conn)

    async def _shut(self, conn: C) -> None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(SHUT_WITHIN):
                await self.shut(conn)

    async def aclose(self) -> None:
        """Stop reconnecting and close the connection; never raises."""
        self.closing = True
        self.up = False
        with contextlib.suppress(Exception):
            await self._announce()
        await self.tasks.aclose()
        if self.conn is not None:
            await self._shut(self.conn)
        self.conn = None
