"""One AMQP connection that heals itself: connect, watch, reconnect, restore.

aio-pika's plain :class:`aio_pika.Connection` is used on purpose rather than its
robust connection: the plugin needs to know *which* connection a failure
happened on (a generation number) to decide whether a publish was lost with
its connection, and it restores its own consumers in a fixed order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

import aio_pika
from aio_pika.abc import AbstractConnection
from aio_pika.exceptions import CONNECTION_EXCEPTIONS

from mqlab.sdk.connect import connect_first
from mqlab.sdk.urls import hide_secret, mask
from mqlab_kombu.errors import InvalidUrl, check_url, describe_connect_error

#: a bounded connect per URL: start() must fail fast when the broker is down
CONNECT_TIMEOUT = 5.0
#: the whole of start() across every URL of the list
START_BUDGET = 10.0
#: reconnect back-off: first attempt at once, then doubling up to the cap
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 10.0
CLOSE_TIMEOUT = 2.0

log = logging.getLogger(__name__)

OnConnect = Callable[[AbstractConnection], Awaitable[None]]


class Link:
    """A named connection to the first reachable broker of ``urls``.

    ``generation`` grows by one on every (re)connection, so a user who saw a
    failure on generation ``g`` can wait for ``g + 1`` instead of retrying on
    a connection that is already dead. After the first connection, a
    supervisor task reconnects forever (with back-off) and runs the
    ``on_connect`` hooks before announcing the new generation.
    """

    def __init__(self, urls: Sequence[str], name: str, heartbeat: int) -> None:
        self._urls = tuple(urls)
        self._name = name
        self._heartbeat = heartbeat
        self._hooks: list[OnConnect] = []
        self._conn: AbstractConnection | None = None
        self._url_index = 0
        self.generation = 0
        self._up = False
        self._closing = False
        self._changed = asyncio.Condition()
        self._lost = asyncio.Event()
        self._supervisor: asyncio.Task[None] | None = None
        #: called with the reason when the connection that was up is lost (then replaced)
        self.on_lost: Callable[[str], None] | None = None
        #: called with a line once a lost connection is back (consumers restored)
        self.on_back: Callable[[str], None] | None = None

    # -- state -------------------------------------------------------------

    @property
    def connection(self) -> AbstractConnection | None:
        """The current connection, ``None`` while reconnecting."""
        return self._conn if self.alive(self.generation) else None

    @property
    def closing(self) -> bool:
        return self._closing

    def alive(self, generation: int) -> bool:
        """True when connection ``generation`` is current and its socket still open."""
        conn = self._conn
        if not self._up or generation != self.generation or conn is None:
            return False
        transport = conn.transport
        return transport is not None and not transport.connection.is_closed

    def add_hook(self, hook: OnConnect) -> None:
        """Run ``hook(connection)`` after every reconnection, before announcing it."""
        self._hooks.append(hook)

    async def wait_newer(self, generation: int, timeout: float | None) -> bool:
        """Wait until a connection newer than ``generation`` is up; False on timeout/close."""

        def ready() -> bool:
            return self._closing or (self._up and self.generation > generation)

        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(ready)
        except TimeoutError:
            return False
        return not self._closing

    @property
    def name(self) -> str:
        """The connection name the broker shows (``mqlab-kombu c1 publish``)."""
        return self._name

    async def wait_up(self, timeout: float | None) -> bool:
        """Wait until a connection is up; False on timeout or close."""
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: self._closing or self._up)
        except TimeoutError:
            return False
        return not self._closing

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- connecting --------------------------------------------------------

    async def _open(self, url: str, timeout: float) -> AbstractConnection:
        conn = await aio_pika.connect(
            url,
            timeout=timeout,
            heartbeat=self._heartbeat,
            client_properties={"connection_name": self._name},
        )
        conn.close_callbacks.add(self._on_close)
        return conn

    async def _open_checked(self, url: str, timeout: float) -> AbstractConnection:
        invalid = check_url(url)
        if invalid is not None:
            raise InvalidUrl(invalid)
        try:
            return await self._open(url, timeout)
        except asyncio.CancelledError:
            # aio-pika cancels its own connect on a timeout: only a real cancel goes on
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            raise TimeoutError from None

    async def start(self) -> None:
        """Connect to the first URL that works; :class:`ConnectFailed` within ~10 s."""
        index, conn = await connect_first(
            self._urls,
            self._open_checked,
            describe_connect_error,
            per_url=CONNECT_TIMEOUT,
            budget=START_BUDGET,
        )
        self._url_index = index
        self._conn = conn
        self._up = True
        self.generation = 1
        self._supervisor = asyncio.get_running_loop().create_task(
            self._supervise(), name=f"{self._name} supervisor"
        )

    def _on_close(self, sender: object, exc: BaseException | None = None) -> None:
        # aio-pika calls this for every connection we made; only the current one matters
        if sender is self._conn and not self._closing:
            if self._up:
                why = hide_secret(repr(exc), self._urls[self._url_index]) if exc else "closed"
                self._report(f"lost: {why}")
            self._up = False
            self._lost.set()

    def _report(self, what: str) -> None:
        if self.on_lost is not None:
            url = mask(self._urls[self._url_index])
            self.on_lost(f"{self._name} connection to {url} {what}; reconnecting")

    def kick(self, generation: int) -> None:
        """Declare connection ``generation`` broken (e.g. a consumer channel died)."""
        if generation == self.generation and self._up and not self._closing:
            self._report("given up: a consumer channel closed")
            self._up = False
            self._lost.set()
            conn = self._conn
            if conn is not None:
                asyncio.get_running_loop().create_task(_quiet_close(conn))

    async def _supervise(self) -> None:
        while not self._closing:
            await self._lost.wait()
            self._lost.clear()
            await self._notify()
            delay = 0.0
            while not self._closing:
                if delay:
                    await asyncio.sleep(delay)
                delay = min(max(delay * 2, BACKOFF_FIRST), BACKOFF_MAX)
                conn = await self._reconnect_once()
                if conn is None:
                    continue
                self._conn = conn
                self.generation += 1
                try:
                    for hook in self._hooks:
                        await hook(conn)
                except (*CONNECTION_EXCEPTIONS, TimeoutError):
                    # the new connection broke while restoring: start over
                    await _quiet_close(conn)
                    continue
                except Exception:
                    # not a connection problem: say so, but keep the link healing
                    log.exception("kombu: restoring %s after a reconnect failed", self._name)
                    await _quiet_close(conn)
                    continue
                if conn.transport is None or conn.transport.connection.is_closed:
                    continue
                # close events of the connections replaced above are stale now
                self._lost.clear()
                self._up = True
                await self._notify()
                if self.on_back is not None:
                    self.on_back(f"reconnected to {mask(self._urls[self._url_index])}")
                break

    async def _reconnect_once(self) -> AbstractConnection | None:
        # start from the URL that worked last, then walk the list (cluster fail-over)
        n = len(self._urls)
        for step in range(n):
            index = (self._url_index + step) % n
            try:
                conn = await self._open(self._urls[index], CONNECT_TIMEOUT)
            except (*CONNECTION_EXCEPTIONS, TimeoutError):
                continue
            self._url_index = index
            return conn
        return None

    async def aclose(self) -> None:
        """Stop reconnecting and close the connection; never raises."""
        self._closing = True
        self._up = False
        with contextlib.suppress(Exception):
            await self._notify()
        if self._supervisor is not None:
            self._supervisor.cancel()
            await asyncio.wait({self._supervisor}, timeout=CLOSE_TIMEOUT)
        if self._conn is not None:
            await _quiet_close(self._conn)


async def _quiet_close(conn: AbstractConnection) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await conn.close()
