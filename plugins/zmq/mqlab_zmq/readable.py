"""Waiting for a socket's next message on the event loop's own reader of its ``ZMQ_FD``.

pyzmq's awaited ``recv`` makes a future, an event record, a done-callback and several
``EVENTS`` reads, and runs its poller state machine, for every wait: tens of
microseconds, paid each time a server has read all that had arrived and waits for more,
thousands of times a second at a fast client's pace. A server's cast loop waits here
instead: an ``EVENTS`` read, and a future that the loop's reader resolves.

``ZMQ_FD`` signals that ``EVENTS`` may have changed, not that a message is there: the
wait reads ``EVENTS`` before it sleeps and after every wake-up. The reader is the
loop's (level-triggered), so a signal that comes between that read and the sleep wakes
it. The socket's owner closes this before the socket, so the loop never watches a
closed descriptor (:class:`mqlab_zmq.sockets.Sockets` does).
"""

from __future__ import annotations

import asyncio
from typing import Any

import zmq


class Readable:
    """Waits, on the running event loop, until ``sock`` has a message to receive."""

    __slots__ = ("_fd", "_loop", "_sock", "_waiter")

    def __init__(self, sock: zmq.Socket[Any]) -> None:
        self._sock = sock
        self._loop = asyncio.get_running_loop()
        self._fd: int | None = int(sock.getsockopt(zmq.FD))
        self._waiter: asyncio.Future[None] | None = None
        self._loop.add_reader(self._fd, self._wake)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Return once a receive would not block."""
        events, pollin = self._sock.getsockopt, int(zmq.POLLIN)
        while not int(events(zmq.EVENTS)) & pollin:
            if self._fd is None:  # closed: nothing would wake it
                raise zmq.ZMQError(zmq.ENOTSOCK)
            waiter = self._waiter = self._loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    def close(self) -> None:
        """Stop watching the socket (before it is closed); a waiter asleep stays so
        until cancelled, a later wait raises."""
        if self._fd is not None:
            if not self._loop.is_closed():
                self._loop.remove_reader(self._fd)
            self._fd = None
