"""Server side: the consume loops behind ``serve_rpc`` and ``serve_notifications``.

Each served target owns a ROUTER (calls, RPC only) and a PULL (casts,
fanout copies, notifications), both bound to an ephemeral TCP port and
registered with the matchmaker. There is no acknowledgement: a message is
gone from the wire once it is read, whatever the handler then does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import zmq
import zmq.asyncio

from mqlab.transport import Handler
from mqlab_zmq.readable import Readable
from mqlab_zmq.wire import FAILED, OK, STRANGER, cast_header

#: messages handled back to back before giving the event loop a turn, so a
#: flood on one socket does not starve the other loops of this process
BATCH = 64


def raw(sock: zmq.asyncio.Socket) -> zmq.Socket[bytes]:
    """A plain view of ``sock`` for non-blocking calls that skip the asyncio wrapper.

    Draining what is already queued this way costs a fraction of an awaited
    recv. Mixing is safe because the wrapper checks ``EVENTS`` before every
    wait, so it never sleeps on messages we left behind.
    """
    return zmq.Socket.shadow(sock.underlying)


async def pump(sock: zmq.asyncio.Socket, each: Callable[[list[bytes]], None]) -> None:
    """Hand every multipart message read from ``sock`` to ``each``, forever.

    One awaited receive, then up to ``BATCH`` non-blocking ones for what is
    already queued, then a turn for the event loop.
    """
    wait, recv = sock.recv_multipart, raw(sock).recv_multipart
    again = zmq.Again
    nowait = int(zmq.DONTWAIT)
    frames: list[bytes] | None = None
    while True:
        if frames is None:
            frames = await wait()
        for _ in range(BATCH):
            each(frames)
            try:
                frames = recv(nowait)
            except again:
                frames = None
                break
        else:
            await asyncio.sleep(0)


async def serve_calls(
    sock: zmq.asyncio.Socket,
    token: bytes,
    handler: Handler,
    on_error: Callable[[BaseException], None],
) -> None:
    """Read ``[identity, token, corr, body]`` from a ROUTER, reply ``[identity, corr, status, x]``.

    The identity frame is how the ROUTER routes the reply back to the caller's DEALER.
    """
    # a ROUTER never blocks: at the caller's high-water mark, or once the caller
    # is gone, the reply is dropped and the caller times out
    send = raw(sock).send_multipart
    nowait = zmq.DONTWAIT

    def handle(frames: list[bytes]) -> None:
        if len(frames) != 4:
            return  # not ours: nothing sensible to answer
        ident, tok, corr, body = frames
        if tok != token:
            send((ident, corr, STRANGER, b""), nowait)
            return
        try:
            reply = handler(body)
        except Exception as exc:  # noqa: BLE001 - one bad message must not stop the server
            on_error(exc)
            send((ident, corr, FAILED, f"{type(exc).__name__}: {exc}".encode()), nowait)
            return
        if reply is not None:
            send((ident, corr, OK, reply), nowait)

    def each(frames: list[bytes]) -> None:
        try:  # noqa: SIM105 - in the hot loop a bare try is cheaper than suppress()
            handle(frames)
        except zmq.ZMQError:
            pass  # the reply is lost, as it would be at the high-water mark

    await pump(sock, each)


async def serve_casts(
    sock: zmq.asyncio.Socket,
    ready: Readable,
    token: bytes,
    handler: Handler,
    on_error: Callable[[BaseException], None],
) -> None:
    """Read ``cast_header(token) + body`` frames from a PULL, hand ``body`` to the handler.

    :func:`pump`'s loop, written out: a cast is a handler call and a non-blocking
    receive, with no call of ours between them (the busiest loop of a server); and
    once all that had arrived is read, the wait for more is ``ready``'s, not pyzmq's
    awaited receive (:mod:`mqlab_zmq.readable`).
    """
    header = cast_header(token)
    start = len(header)
    recv = raw(sock).recv
    again = zmq.Again
    nowait = int(zmq.DONTWAIT)
    frame: bytes | None = None
    while True:
        if frame is None:
            await ready.wait()
            try:
                frame = recv(nowait)
            except again:
                continue
        for _ in range(BATCH):
            if frame.startswith(header):  # no slice made to compare it
                try:
                    handler(frame[start:])
                except Exception as exc:  # noqa: BLE001 - one bad message must not stop the server
                    on_error(exc)
            # else: meant for a previous owner of this port, nobody to tell
            try:
                frame = recv(nowait)
            except again:
                frame = None
                break
        else:
            await asyncio.sleep(0)
