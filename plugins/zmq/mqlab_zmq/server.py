"""Server side: the consume loops behind ``serve_rpc`` and ``serve_notifications``.

Each served target owns a ROUTER (calls, RPC only) and a PULL (casts,
fanout copies, notifications), both bound to an ephemeral TCP port and
registered with the matchmaker. There is no acknowledgement: a message is
gone from the wire once it is read, whatever the handler then does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import zmq.asyncio

from mqlab.transport import Handler
from mqlab_zmq.wire import FAILED, OK, STRANGER

#: messages handled back to back before giving the event loop a turn: awaiting a
#: recv that is already satisfied does not yield, and a flood must not starve
#: the other loops (or the matchmaker refresh) of this process
BATCH = 64


async def serve_calls(
    sock: zmq.asyncio.Socket,
    token: bytes,
    handler: Handler,
    on_error: Callable[[BaseException], None],
) -> None:
    """Read ``[identity, token, corr, body]`` from a ROUTER, reply ``[identity, corr, status, x]``.

    The identity frame is how the ROUTER routes the reply back to the caller's DEALER.
    """
    recv = sock.recv_multipart
    send = sock.send_multipart
    n = 0
    while True:
        frames = await recv()
        n += 1
        if n % BATCH == 0:
            await asyncio.sleep(0)
        if len(frames) != 4:
            continue  # not ours: nothing sensible to answer
        ident, tok, corr, body = frames
        if tok != token:
            await send((ident, corr, STRANGER, b""))
            continue
        try:
            reply = handler(body)
        except Exception as exc:  # one bad message must not stop the server
            on_error(exc)
            await send((ident, corr, FAILED, f"{type(exc).__name__}: {exc}".encode()))
            continue
        if reply is not None:
            # a ROUTER never blocks: at the caller's high-water mark, or once the
            # caller is gone, the reply is dropped and the caller times out
            await send((ident, corr, OK, reply))


async def serve_casts(
    sock: zmq.asyncio.Socket,
    token: bytes,
    handler: Handler,
    on_error: Callable[[BaseException], None],
) -> None:
    """Read ``[token, body]`` from a PULL and hand ``body`` to the handler."""
    recv = sock.recv_multipart
    n = 0
    while True:
        frames = await recv()
        n += 1
        if n % BATCH == 0:
            await asyncio.sleep(0)
        if len(frames) != 2 or frames[0] != token:
            continue  # meant for a previous owner of this port: nobody to tell
        try:
            handler(frames[1])
        except Exception as exc:  # one bad message must not stop the server
            on_error(exc)
