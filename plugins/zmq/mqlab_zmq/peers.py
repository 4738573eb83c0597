"""Client side: one connected socket per server instance the client talks to.

A client keeps a DEALER (calls) and a PUSH (casts, notifications) per record it
has sent to, and picks the record itself: that is how round robin, targeted
calls and fanout casts are all the same code. Sockets are created with
``IMMEDIATE`` set, so nothing is queued towards a peer whose connection is not
up: a send to a dead server waits (and times out) instead of silently filling a
queue that will never drain.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from types import MethodType

import zmq
import zmq.asyncio
from zmq.backend import Socket as _BackendSocket

from mqlab.errors import ConnectionLost, DriverError, TransportError, Undeliverable
from mqlab.sdk.pending import PendingCalls
from mqlab_zmq.matchmaker import Record
from mqlab_zmq.server import pump, raw
from mqlab_zmq.wire import FAILED, OK, cast_header

#: a plain int: pyzmq's flag enums cost an enum operation per send
NOWAIT = int(zmq.DONTWAIT)


def _send_error(record: Record, endpoint: str, exc: zmq.ZMQError) -> TransportError:
    if isinstance(exc, zmq.Again):
        return ConnectionLost(
            f"zmq server {record.server!r} at {endpoint} did not take the message in time: "
            "it is gone or its queue is full (raise send_timeout or hwm, or check the server)"
        )
    return DriverError(f"zmq send to {endpoint} failed: {exc}")


def _closed_under_us(gone: str | None) -> None:
    """Turn the cancellation that closing a socket inflicts on its waiters into an error.

    pyzmq cancels the futures of a socket it closes; the task awaiting one was not
    itself cancelled, and must see why its message went nowhere instead.
    """
    task = asyncio.current_task()
    if gone is not None and (task is None or not task.cancelling()):
        raise ConnectionLost(gone)


class CallPeer:
    """A DEALER connected to one server's ROUTER; replies matched by correlation id."""

    __slots__ = ("gone", "pending", "reader", "record", "sock", "token")

    def __init__(self, sock: zmq.asyncio.Socket, record: Record) -> None:
        self.sock = sock
        self.record = record
        self.token = record.instance.encode()
        self.pending = PendingCalls()
        self.reader = asyncio.get_running_loop().create_task(self._read())
        #: why this peer was closed, once it is
        self.gone: str | None = None

    async def request(self, corr: bytes, body: bytes) -> bytes:
        """Send one call and wait for its reply (the caller bounds the wait)."""
        fut = self.pending.expect(corr)
        try:
            await self.sock.send_multipart((self.token, corr, body))
            return await fut
        except zmq.ZMQError as exc:
            raise _send_error(self.record, self.record.call, exc) from exc
        except asyncio.CancelledError:
            _closed_under_us(self.gone)
            raise
        finally:
            self.pending.forget(corr)

    async def _read(self) -> None:
        await pump(self.sock, self._resolve)

    def _resolve(self, frames: list[bytes]) -> None:
        if len(frames) != 3:
            return
        corr, status, payload = frames
        # a reply whose caller already timed out finds nobody: dropped
        if status == OK:
            self.pending.resolve(corr, payload)
        elif status == FAILED:
            text = payload.decode(errors="replace")
            self.pending.fail(
                corr, DriverError(f"zmq server {self.record.server!r}: the handler failed: {text}")
            )
        else:
            self.pending.fail(
                corr,
                Undeliverable(
                    f"{self.record.call} no longer belongs to zmq server "
                    f"{self.record.server!r} (stale matchmaker record); retry after "
                    "the matchmaker forgets it"
                ),
            )

    def close(self, message: str) -> None:
        """Stop reading; every call still waiting ends with ``ConnectionLost(message)``.

        The owner closes the socket afterwards.
        """
        self.gone = message
        self.reader.cancel()
        self.pending.reject_all(ConnectionLost(message))


class CastPeer:
    """A PUSH connected to one server's (or listener's) PULL.

    Below the high-water mark a cast is one non-blocking send. At the mark, casts
    wait in this peer's backlog, in order, and one flusher task waits for room and
    sends as many as then fit: one poll per burst, where pyzmq's awaited ``send``
    makes a future, a poller registration and a timer for every message (30 % of a
    saturated client's samples). Each waiting cast keeps its own ``send_timeout``.
    """

    __slots__ = (
        "backlog", "flusher", "gone", "header", "plain", "record", "send_now", "sock", "timeout",
    )  # fmt: skip

    def __init__(self, sock: zmq.asyncio.Socket, record: Record, timeout: float | None) -> None:
        self.sock = sock
        self.plain = raw(sock)
        # pyzmq's backend send itself: the Socket class's own send only adds DRAFT
        # routing ids and groups (unused here), at a Python call per message
        self.send_now = MethodType(_BackendSocket.send, self.plain)
        self.record = record
        self.header = cast_header(record.instance.encode())
        self.timeout = timeout  # seconds a cast may wait for room; None: as long as it takes
        #: casts waiting for room, oldest first: (frame, its sender's future, since)
        self.backlog: deque[tuple[bytes, asyncio.Future[None], float]] = deque()
        self.flusher: asyncio.Task[None] | None = None
        self.gone: str | None = None

    async def send(self, body: bytes) -> None:
        """Queue one message; waits while the peer's high-water mark is reached."""
        waiting = self.begin_send(body)
        if waiting is not None:
            await waiting

    def begin_send(self, body: bytes) -> asyncio.Future[None] | None:
        """Send one message now (``None``), or queue it in order and return the
        future that is done once it is sent; awaiting that future is the wait.
        """
        frame = self.header + body
        # the plain non-blocking send skips the asyncio wrapper's bookkeeping; only
        # while nobody waits, or it would overtake them and reorder the stream
        if not self.backlog:
            try:
                self.send_now(frame, NOWAIT)
                return None
            except zmq.Again:
                pass
            except zmq.ZMQError as exc:
                raise _send_error(self.record, self.record.cast, exc) from exc
        if self.gone is not None:
            raise ConnectionLost(self.gone)
        loop = asyncio.get_running_loop()
        sent = loop.create_future()
        # queued before returning, so no later send can overtake it; a waiter
        # cancelled while awaiting ``sent`` cancels it, and the flusher skips it
        self.backlog.append((frame, sent, loop.time()))
        if self.flusher is None:
            self.flusher = loop.create_task(self._flush())
        return sent

    async def _flush(self) -> None:
        """Send the backlog in order as room appears; fail a cast that waited too long."""
        backlog, send = self.backlog, self.send_now
        loop = asyncio.get_running_loop()
        try:
            while backlog:
                frame, sent, since = backlog[0]
                if sent.done():  # its sender was cancelled: not sent
                    backlog.popleft()
                    continue
                try:
                    send(frame, NOWAIT)
                except zmq.Again:
                    left = None if self.timeout is None else since + self.timeout - loop.time()
                    if left is not None and left <= 0:
                        backlog.popleft()
                        sent.set_exception(_send_error(self.record, self.record.cast, zmq.Again()))
                    else:
                        ms = None if left is None else left * 1000
                        # pyzmq's stub leaves out the socket poll's flags argument
                        with contextlib.suppress(zmq.Again):  # its timeout: looked at above
                            await self.sock.poll(ms, zmq.POLLOUT)  # type: ignore[call-arg]
                    continue
                except zmq.ZMQError as exc:
                    backlog.popleft()
                    sent.set_exception(_send_error(self.record, self.record.cast, exc))
                    continue
                backlog.popleft()
                sent.set_result(None)
        except asyncio.CancelledError:
            # closed (or the loop is ending): nobody waits forever
            self._fail(ConnectionLost(self.gone or f"zmq socket to {self.record.cast} closed"))
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. the socket closed under the poll
            self._fail(ConnectionLost(self.gone or f"zmq socket to {self.record.cast}: {exc}"))
        finally:
            self.flusher = None

    def _fail(self, exc: TransportError) -> None:
        while self.backlog:
            _, sent, _ = self.backlog.popleft()
            if not sent.done():
                sent.set_exception(exc)

    def close(self, message: str) -> None:
        """Mark the peer closed; a send still waiting ends with ``ConnectionLost(message)``."""
        self.gone = message
        self._fail(ConnectionLost(message))
        if self.flusher is not None:
            self.flusher.cancel()
