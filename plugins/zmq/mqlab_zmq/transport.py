"""The ``zmq`` transport: brokerless RPC and notifications on pyzmq's asyncio sockets."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
import time
import uuid
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import zmq
import zmq.asyncio

from mqlab.errors import (
    CallTimeout,
    DriverError,
    TransportError,
)
from mqlab.sdk.lifecycle import Tasks
from mqlab.transport import Features, Handler, Option, Target, Transport, TransportConfig
from mqlab_zmq.directory import Directory, Entry
from mqlab_zmq.matchmaker import Key, Matchmaker, Record, StaticMatchmaker
from mqlab_zmq.options import OPTIONS, across_hosts, check_combinations
from mqlab_zmq.peers import NOWAIT, CastPeer
from mqlab_zmq.redis_matchmaker import RedisMatchmaker
from mqlab_zmq.routing import Picker, notify_key, rpc_key
from mqlab_zmq.server import serve_calls, serve_casts
from mqlab_zmq.sockets import Sockets, term
from mqlab_zmq.wire import corr_bytes

log = logging.getLogger(__name__)


class _Route:
    """Where a target's casts go while its lookup is current: its one server's peer,
    with what a cast uses of it at hand."""

    __slots__ = ("backlog", "header", "peer", "send", "target")

    def __init__(self, target: Target, peer: CastPeer) -> None:
        self.target = target
        self.peer = peer
        self.send = peer.send_now
        self.header = peer.header
        self.backlog = peer.backlog


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
    rebuild_of: ClassVar[str] = "oslo.messaging's zmq driver (removed in 9.0.0), on pyzmq"
    features = Features(
        at_most_once=True,  # always: no acks, no redelivery
        mandatory=True,  # a call or cast nobody serves fails at once with Undeliverable
        durable=False,
        fanout=True,
        server=None,
    )
    option_specs: ClassVar[Mapping[str, Option]] = OPTIONS

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self._ctx: zmq.asyncio.Context | None = None
        self._mm: Matchmaker | None = None
        self._dir: Directory | None = None
        self._served: list[_Served] = []
        self._tasks = Tasks(self)
        self._sockets = Sockets(lambda: self._require()[0], self.options)
        self._picker = Picker(self._where)
        self._corr = itertools.count(1)
        self._handler_errors = 0
        self._closed = False
        # a client casts to the same Target objects again and again: while the lookup a
        # target's one server came from is current and not due for refresh, its casts go
        # straight to that server's peer (by id(target); the last one used in front)
        self._routes: dict[int, _Route] = {}
        self._route: _Route | None = None
        # the lookups' refresh, kept by a timer rather than a clock read per cast
        self._routes_due: asyncio.TimerHandle | None = None
        self._routes_until = 0.0

    # -- lifecycle -----------------------------------------------------------

    @classmethod
    def check_combinations(cls, options: Mapping[str, Any]) -> None:
        """Values and combinations the schema cannot express (see :mod:`mqlab_zmq.options`)."""
        check_combinations(options)

    @classmethod
    def across_hosts(cls, options: Mapping[str, Any]) -> str | None:
        """What must reach across machines: the matchmaker and the advertised address."""
        return across_hosts(options)

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
        if root is not None:
            return StaticMatchmaker(Path(root).expanduser())
        name = f"zmq-{self._namespace()}"
        if self.config.scratch_dir is not None:
            # in a run: the step's own directory, which only its workers share
            return StaticMatchmaker(Path(self.config.scratch_dir) / name)
        # outside a run (a test, the conformance kit): this user's private directory, never
        # a path another user of a shared /tmp could have made first
        return StaticMatchmaker(name, private=True)

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
        ttl = float(self.options["lookup_cache"])
        self._dir = Directory(mm, ttl, self._sockets.drop_peers, self._forget_routes)

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
        self._forget_routes()  # a cast from here on is refused as closed (_require)
        mm, directory, ctx = self._mm, self._dir, self._ctx
        if mm is not None:
            for served in self._served:
                # withdraw first, so clients stop picking us before our sockets go
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(mm.unregister(served.key, served.record), 2)
        tasks = [t for s in self._served for t in s.tasks]
        tasks += [p.reader for p in self._sockets.call_peers.values()]
        for task in tasks:
            task.cancel()
        self._sockets.close_peers("the zmq transport was closed while the message was in flight")
        if tasks:
            await asyncio.wait(tasks, timeout=2)
        self._served.clear()
        linger = int(self.options.get("linger", 1000))
        self._sockets.close_all(linger)
        if directory is not None:
            await directory.aclose()
        if mm is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(mm.aclose(), 3)
        if ctx is not None:
            await term(ctx, linger / 1000 + 1)

    # -- sockets -------------------------------------------------------------

    def _require(self) -> tuple[zmq.asyncio.Context, Directory, Matchmaker]:
        if self._ctx is None or self._dir is None or self._mm is None or self._closed:
            state = "closed" if self._closed else "not started"
            raise DriverError(f"the zmq transport is {state}: use it inside `async with`")
        return self._ctx, self._dir, self._mm

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
        sockets: list[zmq.asyncio.Socket] = []
        try:
            call_ep = ""
            if rpc:
                router, call_ep = self._sockets.bind(zmq.ROUTER)
                sockets.append(router)
            pull, cast_ep = self._sockets.bind(zmq.PULL)
            sockets.append(pull)
            ready = self._sockets.readable(pull)
        except BaseException:
            for sock in sockets:
                self._sockets.close_socket(sock, 0)
            raise
        served = _Served(key, Record(instance, server, pool, call_ep, cast_ep), sockets)
        # a serve loop that dies is reported (its messages are counted lost, not silent)
        errors = self._on_handler_error
        if rpc:
            served.tasks.append(
                self._tasks.start(
                    serve_calls(sockets[0], token, handler, errors), f"zmq calls {key}"
                )
            )
        served.tasks.append(
            self._tasks.start(serve_casts(pull, ready, token, handler, errors), f"zmq casts {key}")
        )
        self._served.append(served)
        try:
            await mm.register(key, served.record)
        except BaseException:
            self._served.remove(served)
            for task in served.tasks:
                task.cancel()
            for sock in sockets:
                self._sockets.close_socket(sock, 0)
            raise

    async def serve_rpc(self, target: Target, handler: Handler) -> None:
        """Bind a ROUTER (calls) and a PULL (casts) and register them as ``target.server``."""
        server = target.server or self.config.worker
        await self._serve(rpc_key(target), server, "", handler, rpc=True)

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        """Bind a PULL and register it in ``pool``; each pool gets every notification once."""
        await self._serve(notify_key(target), self.config.worker, pool, handler, rpc=False)

    # -- client side ---------------------------------------------------------

    def _where(self, target: Target) -> str:
        mm = self._require()[2]
        return f"topic {target.topic!r} (exchange {target.exchange!r}) in the {mm.describe()}"

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        """Send to one server (round robin, or ``target.server``) and wait for the reply."""
        directory = self._require()[1]
        key = rpc_key(target)
        record: Record | None = None
        try:
            async with asyncio.timeout(timeout):
                entry = directory.fresh(key) or await directory.get(key)
                record = self._picker.pick(key, entry, target)
                socks = self._sockets
                peer = socks.call_peers.get(record.instance) or socks.call_peer(record)
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
        key = rpc_key(target)
        entry = directory.fresh(key) or await directory.get(key)
        if target.fanout:
            if not entry.records:
                raise self._picker.nobody(target)
            await self._send_each(entry.records, body)
            return
        await self._cast_peer(key, entry, target).send(body)

    def begin_cast(self, target: Target, body: bytes) -> Awaitable[None] | None:
        """A cast whose server is known (a fresh lookup) goes out now, without a
        coroutine, unless its peer is at the high-water mark; anything else
        (a lookup to make, a fanout) is :meth:`cast`'s.
        """
        # one Python call per cast on the way a step's sender takes: the route kept
        # for the target, then pyzmq's backend send
        route = self._route
        if route is None or route.target is not target:
            route = self._routes.get(id(target))
            if route is None or route.target is not target:
                return self._begin_uncached(target, body)
            self._route = route
        if not route.backlog:  # nobody waits for room, whom this send would overtake
            try:
                route.send(route.header + body, NOWAIT)
                return None
            except zmq.ZMQError:
                pass  # at the high-water mark, or worse: the peer queues it, or says why
        return route.peer.begin_send(body)

    def _begin_uncached(self, target: Target, body: bytes) -> Awaitable[None] | None:
        directory = self._require()[1]
        key = rpc_key(target)
        fresh = directory.fresh(key)
        if fresh is None or target.fanout:
            return self.cast(target, body)
        peer = self._cast_peer(key, fresh, target)
        if len(fresh.by_server.get(target.server, ()) if target.server else fresh.records) == 1:
            # one server to pick from: the same peer every time, until the entry changes
            self._keep_route(target, peer, fresh.refresh)
        return peer.begin_send(body)

    def _keep_route(self, target: Target, peer: CastPeer, refresh: float) -> None:
        """Send ``target``'s casts to ``peer`` until the directory changes (it says so)
        or its entry is due for refresh (``refresh``, on ``time.monotonic``'s clock, as
        the directory reads it): then the next cast looks it up again.
        """
        self._routes[id(target)] = self._route = _Route(target, peer)
        if self._routes_due is None or refresh < self._routes_until:
            if self._routes_due is not None:
                self._routes_due.cancel()
            self._routes_until = refresh
            delay = max(0.0, refresh - time.monotonic())
            self._routes_due = asyncio.get_running_loop().call_later(delay, self._forget_routes)

    def _forget_routes(self) -> None:
        self._routes.clear()
        self._route = None
        if self._routes_due is not None:
            self._routes_due.cancel()
            self._routes_due = None

    def _cast_peer(self, key: Key, entry: Entry, target: Target) -> CastPeer:
        """The PUSH to the server this cast goes to (round robin, or ``target.server``)."""
        record = self._picker.pick(key, entry, target)
        socks = self._sockets
        return socks.cast_peers.get(record.instance) or socks.cast_peer(record)

    async def notify(self, target: Target, body: bytes) -> None:
        """One copy per pool, round robin within it; nobody listening means dropped."""
        directory = self._require()[1]
        key = notify_key(target)
        entry = directory.fresh(key) or await directory.get(key)
        chosen = [
            records[0] if len(records) == 1 else self._picker.round_robin(key, pool, records)
            for pool, records in entry.by_pool.items()
        ]
        await self._send_each(chosen, body)

    async def _send_each(self, records: list[Record], body: bytes) -> None:
        """Send to every record; one dead peer must not cost the others their copy."""
        failed: TransportError | None = None
        socks = self._sockets
        for record in records:
            try:
                await (socks.cast_peers.get(record.instance) or socks.cast_peer(record)).send(body)
            except TransportError as exc:
                failed = failed or exc
        if failed is not None:
            raise failed
