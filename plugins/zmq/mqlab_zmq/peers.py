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

import zmq
import zmq.asyncio

from mqlab.errors import ConnectionLost, DriverError, TransportError, Undeliverable
from mqlab.pending import PendingCalls
from mqlab_zmq.matchmaker import Record
from mqlab_zmq.server import pump, raw
from mqlab_zmq.wire import FAILED, OK, cast_header

#: a plain int: pyzmq's flag enums cost an enum operation per send
_NOWAIT = int(zmq.DONTWAIT)


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
    """A PUSH connected to one server's (or listener's) PULL."""

    __slots__ = ("gone", "header", "plain", "record", "sock", "waiting")

    def __init__(self, sock: zmq.asyncio.Socket, record: Record) -> None:
        self.sock = sock
        self.plain = raw(sock)
        self.record = record
        self.header = cast_header(record.instance.encode())
        self.waiting = 0
        self.gone: str | None = None

    async def send(self, body: bytes) -> None:
        """Queue one message; waits while the peer's high-water mark is reached."""
        frame = self.header + body
        # the plain non-blocking send skips the asyncio wrapper's bookkeeping; only
        # while nobody waits, or it would overtake them and reorder the stream
        if not self.waiting:
            try:
                self.plain.send(frame, _NOWAIT)
                return
            except zmq.Again:
                pass
            except zmq.ZMQError as exc:
                raise _send_error(self.record, self.record.cast, exc) from exc
        self.waiting += 1
        try:
            await self.sock.send(frame)
        except zmq.ZMQError as exc:
            raise _send_error(self.record, self.record.cast, exc) from exc
        except asyncio.CancelledError:
            _closed_under_us(self.gone)
            raise
        finally:
            self.waiting -= 1

    def close(self, message: str) -> None:
        """Mark the peer closed; a send still waiting ends with ``ConnectionLost(message)``."""
        self.gone = message
