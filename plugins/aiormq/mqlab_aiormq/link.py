"""The worker's one aiormq connection, made again when the broker closes it or restarts.

:class:`mqlab.sdk.link.Link` runs the loop (report the loss once, back off, reconnect from
the next URL, restore, notice ``reconnected``); this module only speaks aiormq: how to open
and close a connection, and aiormq's "closed" future, which says a connection is gone.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import aiormq
import aiormq.exceptions as aex

from mqlab.sdk import link
from mqlab.sdk.urls import hide_secret
from mqlab.transport import Transport

from . import errors

#: start() gives up on a broker after this long (a black-holed host never refuses); a send
#: waits as long for the connection that replaces a lost one
CONNECT_TIMEOUT = 10.0


class ClosedUnder(ConnectionError):
    """A connection closed under what was using it (aiormq said so with another error, or
    by cancelling what waited on it)."""


def cancelled_by_library(exc: BaseException) -> bool:
    """True when ``exc`` is a cancellation aiormq made (a closing channel or connection
    cancels what waits on it), not one of the task that runs us."""
    if not isinstance(exc, asyncio.CancelledError):
        return False
    task = asyncio.current_task()
    return task is None or not task.cancelling()


def with_heartbeat(url: str, heartbeat: int) -> str:
    """``url`` with aiormq's ``heartbeat`` query parameter set (the option wins over the URL)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "heartbeat"]
    query.append(("heartbeat", str(heartbeat)))
    return urlunsplit(parts._replace(query=urlencode(query)))


class AiormqLink(link.Link[aiormq.Connection]):
    """A named aiormq connection to the first reachable URL, reconnected forever.

    ``on_down(why)`` is called once per loss of a connection that was up (the calls waiting
    for a reply on it fail then; the consumers on it are given up).
    """

    gone = (aex.AMQPConnectionError, aex.ChannelInvalidStateError, OSError, TimeoutError)

    def __init__(self, transport: Transport, name: str, heartbeat: int) -> None:
        urls = transport.urls
        super().__init__(
            transport, urls, name, per_url=CONNECT_TIMEOUT, budget=CONNECT_TIMEOUT * len(urls)
        )
        self.heartbeat = heartbeat
        self.on_down: Callable[[str], None] | None = None

    async def open(self, url: str, timeout: float) -> aiormq.Connection:
        conn = await aiormq.connect(
            with_heartbeat(url, self.heartbeat),
            client_properties={"connection_name": self.name},
        )
        conn.closing.add_done_callback(functools.partial(self._closed, conn))
        return conn

    async def shut(self, conn: aiormq.Connection) -> None:
        await conn.close()

    def is_open(self, conn: aiormq.Connection) -> bool:
        return not conn.is_closed

    def explain(self, url: str, exc: BaseException, timeout: float) -> str:
        return hide_secret(errors.connect_failure(url, exc, timeout), url)

    def _closed(self, conn: aiormq.Connection, closing: asyncio.Future[Any]) -> None:
        if closing.cancelled() or closing.exception() is None:
            why = "closed"
        else:
            exc = closing.exception()
            why = hide_secret(f"{type(exc).__name__}: {exc}", self.urls[self.index])
        self.lost(why, conn)

    def lost(self, why: object, conn: aiormq.Connection | None = None) -> None:
        counted = not self.closing and self.up and (conn is None or conn is self.conn)
        super().lost(why, conn)
        if counted and self.on_down is not None:
            self.on_down(str(why))
