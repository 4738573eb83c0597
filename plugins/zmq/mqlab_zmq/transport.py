"""The ``zmq`` transport: brokerless RPC and notifications on pyzmq's asyncio sockets."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
import os
import random
import tempfile
import threading
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import zmq
import zmq.asyncio

from mqlab.errors import (
    CallTimeout,
    ConnectFailed,
    DriverError,
    TransportError,
    Undeliverable,
)
from mqlab.transport import (
    Features,
    Handler,
    Option,
    OptionConflict,
    Target,
    Transport,
    TransportConfig,
)
from mqlab_zmq.matchmaker import (
    Directory,
    Entry,
    Key,
    Matchmaker,
    Record,
    RedisMatchmaker,
    StaticMatchmaker,
)
from mqlab_zmq.peers import CallPeer, CastPeer
from mqlab_zmq.server import serve_calls, serve_casts
from mqlab_zmq.wire import corr_bytes

log = logging.getLogger(__name__)

_WILDCARDS = frozenset({"0.0.0.0", "*", "::", "[::]"})


@dataclass
class _Served:
    """What one ``serve_*`` call owns."""

    key: Key
    record: Record
    sockets: list[zmq.asyncio.Socket]
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class ZmqTransport(Transport):
    """Brokerless transport on ZeroMQ: every server binds, every client connects.

    - call: the client's DEALER -> the server's ROUTER; the reply comes back on
      the same connection, matched by a correlation id framed in the request.
    - cast: the client's PUSH -> the server's PULL; a fanout cast is one copy
      to every server of the topic.
    - notify: every listener binds its own PULL and registers under its pool;
      the notifier sends one copy per pool, round robin within the pool.
    - who serves what: a matchmaker (``static`` file registry, or ``redis``).

    Round robin, targeted calls and fanout are decided by the client from the
    matchmaker's list, so all of them work the same with either matchmaker.
    Delivery is at most once: zmq has no acknowledgements or redelivery.
    """

    wire = "zmq"
    features = Features(
        at_most_once=True,  # always: no acks, no redelivery
        mandatory=True,  # a call or cast nobody serves fails at once with Undeliverable
        durable=False,
        fanout=True,
        server=None,
    )
    option_specs: ClassVar[Mapping[str, Option]] = {
        "matchmaker": Option(
            (str,),
            "static",
            "where servers publish their endpoints: static (file registry) or redis",
            choices=("static", "redis"),
        ),
        "registry_dir": Option(
            (str,),
            None,
            "static matchmaker directory; default: a temp dir keyed by user and broker URL",
            allow_none=True,
        ),
        "redis_url": Option((str,), "redis://127.0.0.1:6379/0", "redis matchmaker URL"),
        "ttl": Option(
            (int, float),
            10,
            "redis: seconds a registration lives unless refreshed (every ttl/3)",
            minimum=0.01,
        ),
        "lookup_cache": Option(
            (int, float),
            1.0,
            "seconds a client trusts a matchmaker answer before asking again",
            minimum=0,
        ),
        "hwm": Option(
            (int,),
            1000,
            "ZMQ_SNDHWM and ZMQ_RCVHWM of every socket, in messages (0: unlimited)",
            minimum=0,
        ),
        "linger": Option(
            (int,),
            1000,
            "ms a closing socket may keep flushing queued messages (0: drop them; never "
            "infinite, which could hang close)",
            minimum=0,
        ),
        "send_timeout": Option(
            (int, float),
            5.0,
            "seconds a cast or notify may wait for a peer's queue (None: wait forever)",
            allow_none=True,
            minimum=0.001,
        ),
        "bind_address": Option(
            (str,), "127.0.0.1", "interface servers bind their ephemeral TCP ports on"
        ),
        "host": Option(
            (str,),
            None,
            "address servers advertise to clients; default: bind_address",
            allow_none=True,
        ),
    }

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self._ctx: zmq.asyncio.Context | None = None
        self._mm: Matchmaker | None = None
        self._dir: Directory | None = None
        self._served: list[_Served] = []
        self._call_peers: dict[str, CallPeer] = {}
        self._cast_peers: dict[str, CastPeer] = {}
        self._sockets: set[zmq.asyncio.Socket] = set()
        self._rr: dict[tuple[Key, str], int] = {}
        self._corr = itertools.count(1)
        self._handler_errors = 0
        self._closed = False

    # -- lifecycle -----------------------------------------------------------

    @classmethod
    def check_combinations(cls, options: Mapping[str, Any]) -> None:
        """Values and combinations the schema cannot express."""
        opts = options
        if not opts["bind_address"]:
            raise OptionConflict("bind_address", "must not be empty (e.g. 127.0.0.1)")
        if opts["bind_address"] in _WILDCARDS and not opts["host"]:
            raise OptionConflict(
                "host",
                f"bind_address {opts['bind_address']!r} listens everywhere; set host to the "
                "address clients should connect to",
            )
        scheme = opts["redis_url"].split("://", 1)[0]
        if opts["matchmaker"] == "redis" and scheme not in ("redis", "rediss", "unix"):
            raise OptionConflict(
                "redis_url", "expected redis://host:port/db, rediss://... or unix://..."
            )

    def _namespace(self) -> str:
        # the profile's broker URL only keeps separate setups apart; hashed, so a
        # password in it never reaches a path or a redis key
        source = self.urls[0] if self.urls else "default"
        return hashlib.sha1(source.encode()).hexdigest()[:12]

    def _matchmaker(self) -> Matchmaker:
        if self.options["matchmaker"] == "redis":
            prefix = f"mqlab-zmq:{self._namespace()}"
            return RedisMatchmaker(self.options["redis_url"], float(self.options["ttl"]), prefix)
        root = self.options["registry_dir"]
        if root is None:
            name = f"mqlab-zmq-{os.getuid()}-{self._namespace()}"
            return StaticMatchmaker(Path(tempfile.gettempdir()) / name)
        return StaticMatchmaker(Path(root).expanduser())

    async def start(self) -> None:
        """Check the options, create the zmq context and reach the matchmaker."""
        # a context of our own: closing it never touches another transport's sockets
        ctx = zmq.asyncio.Context()
        mm = self._matchmaker()
        try:
            await mm.start()
        except BaseException:
            await mm.aclose()
            ctx.term()
            raise
        self._ctx = ctx
        self._mm = mm
        self._dir = Directory(mm, float(self.options["lookup_cache"]), self._drop_peers)

    async def aclose(self) -> None:
        """Unregister, stop every loop, close sockets with ``linger``; never raises."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._shutdown()
        except Exception:  # aclose never raises
            log.debug("zmq transport: error while closing", exc_info=True)

    async def _shutdown(self) -> None:
        mm, directory, ctx = self._mm, self._dir, self._ctx
        if mm is not None:
            for served in self._served:
                # withdraw first, so clients stop picking us before our sockets go
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(mm.unregister(served.key, served.record), 2)
        tasks = [t for s in self._served for t in s.tasks]
        tasks += [p.reader for p in self._call_peers.values()]
        for task in tasks:
            task.cancel()
        closing = "the zmq transport was closed while the message was in flight"
        peers: list[CallPeer | CastPeer] = [*self._call_peers.values(), *self._cast_peers.values()]
        for peer in peers:
            peer.close(closing)
        if tasks:
            await asyncio.wait(tasks, timeout=2)
        self._served.clear()
        self._call_peers.clear()
        self._cast_peers.clear()
        linger = int(self.options.get("linger", 1000))
        for sock in self._sockets:
            with contextlib.suppress(Exception):
                sock.close(linger=linger)
        self._sockets.clear()
        if directory is not None:
            await directory.aclose()
        if mm is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(mm.aclose(), 3)
        if ctx is not None:
            await _term(ctx, linger / 1000 + 1)

    # -- sockets -------------------------------------------------------------

    def _require(self) -> tuple[zmq.asyncio.Context, Directory, Matchmaker]:
        if self._ctx is None or self._dir is None or self._mm is None or self._closed:
            state = "closed" if self._closed else "not started"
            raise DriverError(f"the zmq transport is {state}: use it inside `async with`")
        return self._ctx, self._dir, self._mm

    def _socket(self, kind: int) -> zmq.asyncio.Socket:
        ctx = self._require()[0]
        sock = ctx.socket(kind)
        hwm = int(self.options["hwm"])
        sock.setsockopt(zmq.SNDHWM, hwm)
        sock.setsockopt(zmq.RCVHWM, hwm)
        sock.setsockopt(zmq.LINGER, int(self.options["linger"]))
        self._sockets.add(sock)
        return sock

    def _bind(self, kind: int) -> tuple[zmq.asyncio.Socket, str]:
        """Bind an ephemeral TCP port; return the socket and the endpoint to advertise."""
        sock = self._socket(kind)
        addr = self.options["bind_address"]
        try:
            sock.bind(f"tcp://{_bracket(addr)}:*")
        except zmq.ZMQError as exc:
            self._close_socket(sock, 0)
            raise ConnectFailed(
                f"cannot bind a zmq socket on {addr}: {exc} (check the bind_address option)"
            ) from exc
        endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        port = endpoint.rsplit(":", 1)[1]
        host = self.options["host"] or addr
        return sock, f"tcp://{_bracket(host)}:{port}"

    def _connect(self, kind: int, endpoint: str, send_timeout: float | None) -> zmq.asyncio.Socket:
        sock = self._socket(kind)
        sock.setsockopt(zmq.IMMEDIATE, 1)
        sock.setsockopt(zmq.SNDTIMEO, -1 if send_timeout is None else int(send_timeout * 1000))
        try:
            sock.connect(endpoint)
        except zmq.ZMQError as exc:
            self._close_socket(sock, 0)
            raise DriverError(f"bad zmq endpoint {endpoint!r} from the matchmaker: {exc}") from exc
        return sock

    def _close_socket(self, sock: zmq.asyncio.Socket, linger: int) -> None:
        self._sockets.discard(sock)
        with contextlib.suppress(Exception):
            sock.close(linger=linger)

    def _call_peer(self, record: Record) -> CallPeer:
        peer = self._call_peers.get(record.instance)
        if peer is None:
            # calls are bounded by their own timeout, not by send_timeout
            peer = CallPeer(self._connect(zmq.DEALER, record.call, None), record)
            self._call_peers[record.instance] = peer
        return peer

    def _cast_peer(self, record: Record) -> CastPeer:
        peer = self._cast_peers.get(record.instance)
        if peer is None:
            sock = self._connect(zmq.PUSH, record.cast, self.options["send_timeout"])
            peer = CastPeer(sock, record)
            self._cast_peers[record.instance] = peer
        return peer

    def _drop_peers(self, records: Iterable[Record]) -> None:
        """The matchmaker forgot these servers: close our sockets to them."""
        for record in records:
            left = (
                f"zmq server {record.server!r} left the matchmaker while the message was in "
                "flight; it may or may not have been handled"
            )
            for peer in (
                self._call_peers.pop(record.instance, None),
                self._cast_peers.pop(record.instance, None),
            ):
                if peer is not None:
                    peer.close(left)
                    self._close_socket(peer.sock, 0)

    # -- server side ---------------------------------------------------------

    def _on_handler_error(self, exc: BaseException) -> None:
        self._handler_errors += 1
        if self._handler_errors == 1:
            # once: a failing handler usually fails for every message
            log.warning("zmq transport: a handler raised (further errors not logged): %r", exc)

    async def _serve(self, key: Key, server: str, pool: str, handler: Handler, rpc: bool) -> None:
        mm = self._require()[2]
        instance = uuid.uuid4().hex
        token = instance.encode()
        loop = asyncio.get_running_loop()
        sockets: list[zmq.asyncio.Socket] = []
        try:
            call_ep = ""
            if rpc:
                router, call_ep = self._bind(zmq.ROUTER)
                sockets.append(router)
            pull, cast_ep = self._bind(zmq.PULL)
            sockets.append(pull)
        except BaseException:
            for sock in sockets:
                self._close_socket(sock, 0)
            raise
        served = _Served(key, Record(instance, server, pool, call_ep, cast_ep), sockets)
        if rpc:
            served.tasks.append(
                loop.create_task(serve_calls(sockets[0], token, handler, self._on_handler_error))
            )
        served.tasks.append(
            loop.create_task(serve_casts(sockets[-1], token, handler, self._on_handler_error))
        )
        self._served.append(served)
        try:
            await mm.register(key, served.record)
        except BaseException:
            self._served.remove(served)
            for task in served.tasks:
                task.cancel()
            for sock in sockets:
                self._close_socket(sock, 0)
            raise

    async def serve_rpc(self, target: Target, handler: Handler) -> None:
        """Bind a ROUTER (calls) and a PULL (casts) and register them as ``target.server``."""
        server = target.server or self.config.worker
        await self._serve(_rpc_key(target), server, "", handler, rpc=True)

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        """Bind a PULL and register it in ``pool``; each pool gets every notification once."""
        await self._serve(_notify_key(target), self.config.worker, pool, handler, rpc=False)

    # -- client side ---------------------------------------------------------

    def _where(self, target: Target) -> str:
        mm = self._require()[2]
        return f"topic {target.topic!r} (exchange {target.exchange!r}) in the {mm.describe()}"

    def _nobody(self, target: Target) -> Undeliverable:
        return Undeliverable(
            f"no zmq server serves {self._where(target)}; start one, or check the topic, "
            "exchange and matchmaker options"
        )

    def _round_robin(self, key: Key, group: str, records: list[Record]) -> Record:
        rr = (key, group)
        i = self._rr.get(rr)
        if i is None:
            # spread many clients over the servers from their very first message
            i = random.randrange(len(records))
        self._rr[rr] = i + 1
        return records[i % len(records)]

    def _pick(self, key: Key, entry: Entry, target: Target) -> Record:
        if target.server:
            named = entry.by_server.get(target.server)
            if not named:
                known = ", ".join(sorted(entry.by_server)) or "none"
                raise Undeliverable(
                    f"no zmq server named {target.server!r} serves {self._where(target)} "
                    f"(servers of this topic: {known})"
                )
            return named[0] if len(named) == 1 else self._round_robin(key, target.server, named)
        if not entry.records:
            raise self._nobody(target)
        return self._round_robin(key, "", entry.records)

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        """Send to one server (round robin, or ``target.server``) and wait for the reply."""
        directory = self._require()[1]
        key = _rpc_key(target)
        record: Record | None = None
        try:
            async with asyncio.timeout(timeout):
                entry = directory.fresh(key) or await directory.get(key)
                record = self._pick(key, entry, target)
                peer = self._call_peers.get(record.instance) or self._call_peer(record)
                return await peer.request(corr_bytes(next(self._corr)), body)
        except TimeoutError as exc:
            if record is None:
                raise CallTimeout(
                    f"no reply within {timeout:g}s: the matchmaker lookup for "
                    f"{self._where(target)} did not finish"
                ) from exc
            raise CallTimeout(
                f"no reply from zmq server {record.server!r} at {record.call} within "
                f"{timeout:g}s (is it alive and keeping up? zmq has no acks: an unanswered "
                "request is lost)"
            ) from exc

    async def cast(self, target: Target, body: bytes) -> None:
        """Queue to one server, ``target.server``, or every server if ``target.fanout``."""
        directory = self._require()[1]
        key = _rpc_key(target)
        entry = directory.fresh(key) or await directory.get(key)
        if target.fanout:
            if not entry.records:
                raise self._nobody(target)
            await self._send_each(entry.records, body)
            return
        record = self._pick(key, entry, target)
        await (self._cast_peers.get(record.instance) or self._cast_peer(record)).send(body)

    async def notify(self, target: Target, body: bytes) -> None:
        """One copy per pool, round robin within it; nobody listening means dropped."""
        directory = self._require()[1]
        key = _notify_key(target)
        entry = directory.fresh(key) or await directory.get(key)
        chosen = [
            records[0] if len(records) == 1 else self._round_robin(key, pool, records)
            for pool, records in entry.by_pool.items()
        ]
        await self._send_each(chosen, body)

    async def _send_each(self, records: list[Record], body: bytes) -> None:
        """Send to every record; one dead peer must not cost the others their copy."""
        failed: TransportError | None = None
        for record in records:
            try:
                await (self._cast_peers.get(record.instance) or self._cast_peer(record)).send(body)
            except TransportError as exc:
                failed = failed or exc
        if failed is not None:
            raise failed


def _rpc_key(target: Target) -> Key:
    return ("rpc", target.exchange, target.topic)


def _notify_key(target: Target) -> Key:
    # the priority is part of the topic, as in the AMQP routing key <topic>.<priority>
    return ("notify", target.exchange, f"{target.topic}.{target.priority}")


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


async def _term(ctx: zmq.asyncio.Context, timeout: float) -> None:
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
