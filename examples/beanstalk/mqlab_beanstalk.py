"""A plugin for beanstalkd, a work queue mqlab does not know: its own URL scheme, its own
server for mqlab to start and measure, and the SDK for everything that is not beanstalkd.

Written from docs/writing-a-plugin.md, docs/plugins.md and greenstalk's documentation.
greenstalk blocks: each consumer reserves in a thread of its own, sends go through a few.
A topic's servers share the tube ``rpc.<exchange>.<topic>``, each has ``to.<...>.<server>``,
each pool ``pool.<...>.<pool>``. A server marks its tubes with a job delayed for ever until
it closes (the last one empties them), so a tube is served while its reader reconnects; a
fanout cast or a notification goes to every served tube of the prefix, and nothing is put
into a tube nobody serves (an exchange with no queue drops it): ``mandatory`` says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import threading
import uuid
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Any, ClassVar, cast

import greenstalk
import msgpack

from mqlab.errors import ConnectionLost, ErrorRule, Undeliverable, map_errors
from mqlab.sdk import consume, retry
from mqlab.sdk.connect import connect_first, explain
from mqlab.sdk.lifecycle import Tasks, close_all
from mqlab.sdk.replies import Replies
from mqlab.sdk.server import Launch, Server, free_port
from mqlab.sdk.threads import ThreadPool
from mqlab.sdk.urls import host_port
from mqlab.transport import CONNECT_TIMEOUT, Features, Handler, Option, Target, Transport

Client = greenstalk.Client[bytes]
LOST = (OSError,)  # greenstalk's socket errors; EOF is a ConnectionError too
RULES: list[ErrorRule] = [
    (greenstalk.JobTooBigError, lambda e: Undeliverable(f"beanstalkd: job too big: {e}")),
    (LOST, lambda e: ConnectionLost(f"beanstalkd connection lost: {e}")),
]
FOREVER = 2**32 - 1  # the longest delay beanstalkd takes: a job never reserved
_UNSAFE = re.compile(r"[^A-Za-z0-9+/;.$()-]")  # not allowed in a tube's name: written _XX


def tube(*parts: str) -> str:
    return ".".join(_UNSAFE.sub(lambda m: "".join(f"_{b:02x}" for b in m[0].encode()), p)
                    for p in parts)  # fmt: skip


def _client(url: str, timeout: float) -> Client:
    sock = socket.create_connection(host_port(url), timeout)
    sock.settimeout(None)  # a reserve waits as long as it asked to
    return greenstalk.Client(sock, encoding=None)


class Beanstalkd(Server):
    """A private beanstalkd: Debian's binary, jobs up to 16 MiB, kept in a binlog."""

    label, binary, package = "beanstalkd", "/usr/bin/beanstalkd", "beanstalkd"
    version_argv = ("-v",)

    def launch(self, state_dir: Path) -> Launch:
        port, binlog = free_port(), state_dir / "binlog"
        binlog.mkdir(exist_ok=True)  # a restart finds the jobs it held
        argv = [self.binary, "-l", "127.0.0.1", "-p", str(port), "-z", str(16 * 2**20),
                "-b", str(binlog)]  # fmt: skip
        return Launch(argv, port, f"beanstalk://127.0.0.1:{port}")

    async def depth(self, url: str, marker: str) -> int | None:
        def ready() -> int:
            with _client(url, 5.0) as c:
                names = [t for t in c.tubes() if marker in t]
                return sum(int(c.stats_tube(t)["current-jobs-ready"]) for t in names)

        return await asyncio.to_thread(ready)


class BeanstalkTransport(Transport):
    wire = "beanstalk"
    url_schemes: ClassVar[Mapping[str, int | None]] = {"beanstalk": 11300}
    features = Features(at_most_once=True, mandatory=True, fanout=True, server="beanstalkd")
    option_specs: ClassVar[Mapping[str, Option]] = {
        "retry": retry.RETRY,
        "ack": Option((str,), "after", "delete a job after its handler ran, or before "
                      "(at most once)", choices=("after", "before")),
        "mandatory": Option((bool,), False, "fail a call or cast nobody serves",
                            feature="mandatory", needs=(True,)),
        "senders": Option((int,), 8, "threads sending, a connection each", minimum=1,
                          maximum=256),
        "connect_timeout": CONNECT_TIMEOUT,
    }  # fmt: skip

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.url, self.tasks, self.local = "", Tasks(self), threading.local()
        self.senders = ThreadPool(self.options["senders"], "beanstalk-send")
        self.readers: list[tuple[ThreadPool, list[Client | None]]] = []
        self.marks: list[tuple[str, int]] = []  # the jobs saying this server serves a tube
        me = tube("reply", self.config.worker, uuid.uuid4().hex[:8])
        self.replies = Replies(self.tasks, me, lambda ready: self._consume([me], None, ready))

    async def start(self) -> None:
        def probe(url: str, timeout: float) -> Awaitable[None]:
            return asyncio.to_thread(lambda: _client(url, timeout).close())

        timeout = float(self.options["connect_timeout"])
        i, _ = await connect_first(self.urls, probe, explain, per_url=timeout)
        self.url = self.urls[i]

    async def aclose(self) -> None:
        self.replies.close()
        for _, held in self.readers:  # a reserve waiting in a thread returns at once
            with contextlib.suppress(OSError, AttributeError):
                held[0]._sock.shutdown(socket.SHUT_RDWR)  # type: ignore[union-attr]
        marks, self.marks = self.marks, []
        await close_all(self.tasks.aclose, lambda: self.senders.run(self._leave, marks))
        for pool, _ in [*self.readers, (self.senders, [])]:
            pool.shutdown()
        self.readers = []

    def _leave(self, marks: list[tuple[str, int]]) -> None:
        client = self._sender()
        for name, job in marks:
            with contextlib.suppress(greenstalk.NotFoundError):
                client.delete(job)
            client.use(name)
            while not self._served(name):  # the last server empties it: the tube goes
                try:
                    client.delete(client.peek_ready())
                except greenstalk.NotFoundError:
                    break

    # -- servers: a thread each, reserving from their tubes ---------------------------

    async def serve_rpc(self, target: Target, handler: Handler) -> None:
        me = target.server or self.config.worker
        await self._serve([tube("rpc", target.exchange, target.topic),
                           tube("to", target.exchange, target.topic, me)], handler)  # fmt: skip

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        await self._serve([tube("pool", target.exchange, target.topic, pool)], handler)

    async def _serve(self, names: list[str], handler: Handler) -> None:
        ready = asyncio.get_running_loop().create_future()
        self.tasks.start(self._consume(names, handler, ready), f"beanstalk reader {names[0]}")
        await ready  # watching: what is sent from now on is ours
        marks = await self.senders.run(lambda: [self._put_in(n, b"", FOREVER) for n in names])
        self.marks += zip(names, marks, strict=True)

    async def _consume(self, names: list[str], handler: Handler | None, ready: Any) -> None:
        pool, held = ThreadPool(1, f"beanstalk {names[0]}"), list[Client | None]([None])
        self.readers.append((pool, held))
        early = self.options["ack"] == "before" and handler is not None

        def connect() -> None:
            held[0] = client = _client(self.url, self.options["connect_timeout"])
            for name in names:
                client.watch(name)
            client.ignore("default")

        def reserve() -> list[greenstalk.Job[bytes]]:
            try:
                job = held[0].reserve(timeout=1)  # type: ignore[union-attr]
            except greenstalk.TimedOutError:
                return []
            if early:
                held[0].delete(job)  # type: ignore[union-attr]
            return [job]

        async def handle(job: greenstalk.Job[bytes]) -> None:
            kind, reply_to, corr, body = msgpack.unpackb(job.body)
            if handler is None:
                self.replies.resolve(corr, body)
            elif (answer := handler(body)) is not None and kind == "call":
                await self._put("", reply_to, ["reply", "", corr, answer])
            if not early:
                await pool.run(held[0].delete, job)  # type: ignore[union-attr]

        await pool.run(connect)
        ready.set_result(None)
        await consume.consume(
            self, lambda: pool.run(reserve), handle, url=self.url, what=f"reader of {names[0]}",
            lost=LOST, reconnect=lambda: pool.run(connect),
        )  # fmt: skip

    # -- clients ------------------------------------------------------------------------

    def _sender(self) -> Client:
        if getattr(self.local, "client", None) is None:
            self.local.client = _client(self.url, self.options["connect_timeout"])
        return cast(Client, self.local.client)

    def _put_in(self, name: str, data: bytes, delay: int = 0) -> int:
        client = self._sender()
        client.use(name)
        return client.put(data, delay=delay)

    def _served(self, name: str) -> bool:
        try:
            stats = self._sender().stats_tube(name)
        except greenstalk.NotFoundError:
            return False
        return int(stats["current-jobs-delayed"]) + int(stats["current-watching"]) > 0

    def _put_now(self, prefix: str, only: str, data: bytes) -> int:
        """Put into ``only``, or every tube of ``prefix``, if served; how many got it."""
        try:
            names = [only] if only else [t for t in self._sender().tubes() if t.startswith(prefix)]
            served = [name for name in names if self._served(name)]
            for name in served:
                self._put_in(name, data)
            return len(served)
        except LOST:
            self.local.client = None  # the next send reconnects
            raise

    async def _put(self, prefix: str, only: str, message: list[Any]) -> int:
        data = msgpack.packb(message)
        with map_errors(RULES):
            return await retry.send(
                lambda: self.senders.run(self._put_now, prefix, only, data),
                retry=self.options["retry"], lost=LOST, what=f"a put to {only or prefix}",
                reconnected=lambda: self.senders.run(self._sender),
            )  # fmt: skip

    async def _send_rpc(self, target: Target, message: list[Any]) -> None:
        kind, (ex, topic, *server) = target.route()
        if kind == "all":
            sent = await self._put(tube("to", ex, topic) + ".", "", message)
        else:
            name = tube("rpc", ex, topic) if kind == "rpc" else tube("to", ex, topic, *server)
            sent = await self._put("", name, message)
        if not sent and self.options["mandatory"]:
            raise Undeliverable(f"nobody serves {target.describe()}")

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        return await self.replies.call(target, timeout, lambda corr: self._send_rpc(
            target, ["call", self.replies.address, corr, body]))  # fmt: skip

    async def cast(self, target: Target, body: bytes) -> None:
        await self._send_rpc(target, ["cast", "", "", body])

    async def notify(self, target: Target, body: bytes) -> None:
        prefix = tube("pool", target.exchange, target.topic) + "."
        await self._put(prefix, "", ["notify", "", "", body])
