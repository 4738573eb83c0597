"""The client-side cache in front of a matchmaker: :class:`Directory`.

Clients look a target up on (almost) every message; the cache keeps that off
the registry, groups the answer the ways clients pick from it (by server, by
pool), and reports the servers that disappeared so their sockets get closed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mqlab_zmq.matchmaker import Key, Matchmaker, Record

#: the fraction of ``ttl`` after which a lookup is refreshed in the background
REFRESH_AT = 0.75


@dataclass(slots=True)
class Entry:
    """A cached lookup, pre-grouped the ways clients pick from it."""

    records: list[Record]
    expires: float
    refresh: float  # from here on, a lookup runs in the background before it expires
    by_server: dict[str, list[Record]]
    by_pool: dict[str, list[Record]]

    @classmethod
    def of(cls, records: list[Record], now: float, ttl: float) -> Entry:
        by_server: dict[str, list[Record]] = {}
        by_pool: dict[str, list[Record]] = {}
        for r in records:
            by_server.setdefault(r.server, []).append(r)
            by_pool.setdefault(r.pool, []).append(r)
        return cls(records, now + ttl, now + ttl * REFRESH_AT, by_server, by_pool)


def _consume_exception(task: asyncio.Task[Entry]) -> None:
    if not task.cancelled():
        task.exception()


class Directory:
    """Client-side cache in front of a matchmaker.

    A lookup is trusted for ``ttl`` seconds; one lookup per key is in flight at
    a time however many callers wait. An entry in use is looked up again in the
    background once three quarters of its ``ttl`` have passed, so a busy client's
    sends never all stop at its expiry to wait for the matchmaker together (they
    resumed in another order than they were numbered, and a step counted those
    receipts as out of order). No entry is used after its ``ttl``: a server that
    left is still noticed within ``ttl``. Empty answers are not cached, so a
    client finds a server the moment it registers. ``on_removed`` hears about
    records that disappeared, so their sockets can be closed; ``on_change`` hears about
    every change, so what was cached from an entry is dropped.
    """

    def __init__(
        self,
        matchmaker: Matchmaker,
        ttl: float,
        on_removed: Callable[[Iterable[Record]], None],
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.matchmaker = matchmaker
        self.ttl = ttl
        self._on_removed = on_removed
        #: called at every change of the entries: what a client cached from one is
        #: current until then
        self._on_change = on_change
        self._entries: dict[Key, Entry] = {}
        self._inflight: dict[Key, asyncio.Task[Entry]] = {}

    def fresh(self, key: Key) -> Entry | None:
        """The entry if it is within its ``ttl`` (refreshed ahead of it when due), else None."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        now = time.monotonic()
        if now >= entry.refresh:
            if now >= entry.expires:
                return None
            if key not in self._inflight:
                entry.refresh = entry.expires  # once per entry, even if the lookup fails
                self._start(key)
        return entry

    async def get(self, key: Key) -> Entry:
        entry = self.fresh(key)
        if entry is not None:
            return entry
        task = self._inflight.get(key) or self._start(key)
        # one caller's timeout must not cancel the lookup the others wait for
        return await asyncio.shield(task)

    def _start(self, key: Key) -> asyncio.Task[Entry]:
        task = asyncio.get_running_loop().create_task(self._lookup(key))
        # retrieved here so a failure nobody waits for (a background refresh's, or
        # one whose callers gave up) is not reported as lost; the next get() after
        # the entry expires looks up again and raises it to its caller
        task.add_done_callback(_consume_exception)
        self._inflight[key] = task
        return task

    async def _lookup(self, key: Key) -> Entry:
        try:
            records = await self.matchmaker.lookup(key)
        finally:
            self._inflight.pop(key, None)
        old = self._entries.get(key)
        entry = Entry.of(records, time.monotonic(), self.ttl)
        self._on_change()
        if records:
            self._entries[key] = entry
        else:
            self._entries.pop(key, None)
        if old is not None:
            alive = {r.instance for r in records}
            gone = [r for r in old.records if r.instance not in alive]
            if gone:
                self._on_removed(gone)
        return entry

    def forget(self, key: Key) -> None:
        self._entries.pop(key, None)
        self._on_change()

    async def aclose(self) -> None:
        for task in list(self._inflight.values()):
            task.cancel()
        if self._inflight:
            await asyncio.gather(*self._inflight.values(), return_exceptions=True)
        self._inflight.clear()
        self._entries.clear()
        self._on_change()
