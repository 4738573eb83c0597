"""Every zmq socket one transport owns: the ones its servers bind, and its peers.

Servers bind ephemeral TCP ports and advertise ``host`` (or ``bind_address``);
clients keep one connected socket per server instance they talk to
(:mod:`mqlab_zmq.peers`), created on first use and closed when the matchmaker
forgets the server. All of them take the transport's ``hwm`` and ``linger``, so
closing the transport can close every one with a bounded linger, then terminate
the context off the event loop (:func:`term`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import zmq
import zmq.asyncio

from mqlab.errors import ConnectFailed, DriverError
from mqlab_zmq.matchmaker import Record
from mqlab_zmq.peers import CallPeer, CastPeer
from mqlab_zmq.readable import Readable
from mqlab_zmq.server import raw


class Sockets:
    """Creates, tracks and closes the transport's sockets.

    ``context`` is the transport's accessor: it raises when the transport is
    not started or already closed, so no socket outlives it.
    """

    def __init__(
        self, context: Callable[[], zmq.asyncio.Context], options: Mapping[str, Any]
    ) -> None:
        self._context = context
        self._options = options
        self._sockets: set[zmq.asyncio.Socket] = set()
        # the event loop's readers on sockets' descriptors, closed before their sockets
        self._readers: dict[zmq.asyncio.Socket, Readable] = {}
        #: connected peers by server instance (looked up on every send)
        self.call_peers: dict[str, CallPeer] = {}
        self.cast_peers: dict[str, CastPeer] = {}

    def _socket(self, kind: int) -> zmq.asyncio.Socket:
        sock = self._context().socket(kind)
        hwm = int(self._options["hwm"])
        sock.setsockopt(zmq.SNDHWM, hwm)
        sock.setsockopt(zmq.RCVHWM, hwm)
        sock.setsockopt(zmq.LINGER, int(self._options["linger"]))
        self._sockets.add(sock)
        return sock

    def bind(self, kind: int) -> tuple[zmq.asyncio.Socket, str]:
        """Bind an ephemeral TCP port; return the socket and the endpoint to advertise."""
        sock = self._socket(kind)
        addr = self._options["bind_address"]
        try:
            sock.bind(f"tcp://{_bracket(addr)}:*")
        except zmq.ZMQError as exc:
            self.close_socket(sock, 0)
            raise ConnectFailed(
                f"cannot bind a zmq socket on {addr}: {exc} (check the bind_address option)"
            ) from exc
        endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        port = endpoint.rsplit(":", 1)[1]
        host = self._options["host"] or addr
        return sock, f"tcp://{_bracket(host)}:{port}"

    def _connect(self, kind: int, endpoint: str, send_timeout: float | None) -> zmq.asyncio.Socket:
        sock = self._socket(kind)
        sock.setsockopt(zmq.IMMEDIATE, 1)
        sock.setsockopt(zmq.SNDTIMEO, -1 if send_timeout is None else int(send_timeout * 1000))
        try:
            sock.connect(endpoint)
        except zmq.ZMQError as exc:
            self.close_socket(sock, 0)
            raise DriverError(f"bad zmq endpoint {endpoint!r} from the matchmaker: {exc}") from exc
        return sock

    def readable(self, sock: zmq.asyncio.Socket) -> Readable:
        """A wait for ``sock``'s messages on the event loop's reader of its descriptor
        (for a socket nobody awaits through pyzmq's asyncio wrapper)."""
        reader = self._readers[sock] = Readable(raw(sock))
        return reader

    def close_socket(self, sock: zmq.asyncio.Socket, linger: int) -> None:
        self._sockets.discard(sock)
        reader = self._readers.pop(sock, None)
        if reader is not None:
            reader.close()
        with contextlib.suppress(Exception):
            sock.close(linger=linger)

    def call_peer(self, record: Record) -> CallPeer:
        """The DEALER to ``record``'s ROUTER, connected on first use."""
        peer = self.call_peers.get(record.instance)
        if peer is None:
            # calls are bounded by their own timeout, not by send_timeout
            peer = CallPeer(self._connect(zmq.DEALER, record.call, None), record)
            self.call_peers[record.instance] = peer
        return peer

    def cast_peer(self, record: Record) -> CastPeer:
        """The PUSH to ``record``'s PULL, connected on first use."""
        peer = self.cast_peers.get(record.instance)
        if peer is None:
            timeout = self._options["send_timeout"]
            peer = CastPeer(self._connect(zmq.PUSH, record.cast, timeout), record, timeout)
            self.cast_peers[record.instance] = peer
        return peer

    def drop_peers(self, records: Iterable[Record]) -> None:
        """The matchmaker forgot these servers: close our sockets to them."""
        for record in records:
            left = (
                f"zmq server {record.server!r} left the matchmaker while the message was in "
                "flight; it may or may not have been handled"
            )
            for peer in (
                self.call_peers.pop(record.instance, None),
                self.cast_peers.pop(record.instance, None),
            ):
                if peer is not None:
                    peer.close(left)
                    self.close_socket(peer.sock, 0)

    def close_peers(self, reason: str) -> None:
        """Fail every message in flight to a peer with ``reason``; forget the peers."""
        peers: list[CallPeer | CastPeer] = [*self.call_peers.values(), *self.cast_peers.values()]
        for peer in peers:
            peer.close(reason)
        self.call_peers.clear()
        self.cast_peers.clear()

    def close_all(self, linger: int) -> None:
        """Close every socket, letting each flush for at most ``linger`` ms."""
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()
        for sock in self._sockets:
            with contextlib.suppress(Exception):
                sock.close(linger=linger)
        self._sockets.clear()


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


async def term(ctx: zmq.asyncio.Context, timeout: float) -> None:
    """Terminate ``ctx`` without blocking the loop, waiting at most ``timeout`` seconds.

    ``term`` blocks until every socket's linger has run out; a daemon thread keeps
    a stuck peer from holding the event loop, or the interpreter at exit.
    """
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def run() -> None:
        with contextlib.suppress(Exception):
            ctx.term()
        with contextlib.suppress(RuntimeError):  # the loop may be gone already
            loop.call_soon_threadsafe(_resolve, done)

    threading.Thread(target=run, name="mqlab-zmq-term", daemon=True).start()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done, timeout)


def _resolve(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_result(None)
