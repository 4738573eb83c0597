"""One py-amqp connection owned by one thread, as seed 002's ``Pyamqp_Threads`` runs it.

py-amqp is blocking and not thread-safe: a connection and its channels belong
to the thread that opened them. So each :class:`Worker` is a thread with its own
connection. The event loop hands it work through a queue and awaits an asyncio
future; between pieces of work the thread drains the connection's events
(deliveries, confirms), so one thread both publishes and consumes. A lost
connection fails the work queued on it, as :class:`mqlab.errors.ConnectionLost`;
its :class:`Link` (the SDK's self-healing link) reports it, opens a new thread and
connection, and restores what consumed on the old one.

Every crossing between the thread and the loop costs CPU (a wake-up write, a
thread switch, the GIL passed back): with the core's handler per delivery, it
cost more than py-amqp's own read, decode and ack (docs/findings.md). So the
thread crosses once per batch: it settles every piece of work it found queued
with one call onto the loop, and while the broker has sent more it reads on
(up to :data:`BATCH` deliveries) before its ``after_drain`` hooks hand the
deliveries over together.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import select
import socket
import struct
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import amqp as pyamqp
from amqp import exceptions as amqp_exc

from mqlab.errors import ConnectFailed, ConnectionLost, DriverError
from mqlab.sdk import amqp as topology
from mqlab.sdk import link
from mqlab.sdk.urls import hide_secret
from mqlab.transport import Transport

#: seconds the thread waits for broker events before it looks at its work queue again
#: (work wakes it at once; this only bounds how late it notices a stop)
POLL = 0.05

#: deliveries a consuming thread reads, while more are waiting, before it hands them over
BATCH = 256

#: what py-amqp raises once the connection is gone
GONE = (OSError, amqp_exc.ConnectionError, amqp_exc.RecoverableConnectionError)

Work = Callable[["Worker"], Any]
#: a piece of work and the future its result settles, on its loop
Item = tuple[Work, "asyncio.Future[Any]", asyncio.AbstractEventLoop]
#: what the thread sends the loop: each future with its result or its exception
Settled = list[tuple["asyncio.Future[Any]", Any, BaseException | None]]


def connection_kwargs(url: str, timeout: float) -> dict[str, Any]:
    """py-amqp's Connection arguments for an ``amqp://user:pass@host:port/vhost`` URL."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "amqp":
        raise ConnectFailed("the pyamqp plugin takes amqp:// URLs (amqp://host:5672/)")
    vhost = urllib.parse.unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
    return {
        "host": f"{parts.hostname or 'localhost'}:{parts.port or 5672}",
        "userid": urllib.parse.unquote(parts.username or "guest"),
        "password": urllib.parse.unquote(parts.password or "guest"),
        "virtual_host": vhost,
        "connect_timeout": timeout,
        "heartbeat": 0,  # py-amqp beats only when the application ticks it; mqlab does not
    }


def explain(url: str, exc: BaseException, timeout: float) -> str:
    """Why connecting to ``url`` failed, in one clause without the password."""
    if isinstance(exc, TimeoutError | OSError) and "timed out" in str(exc):
        return f"no answer within {timeout:g}s"
    return hide_secret(str(exc) or type(exc).__name__, url)


def describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def mapped(exc: BaseException) -> BaseException:
    """A py-amqp exception as mqlab's error (the caller chains it with ``from``)."""
    if isinstance(exc, amqp_exc.ChannelError):
        return DriverError(f"the broker refused: {describe(exc)}")
    if isinstance(exc, GONE):
        return ConnectionLost(f"the connection to the broker was lost: {describe(exc)}")
    return exc


class Link(link.Link["Worker"]):
    """One connection in a thread of its own, replaced by a new one when it is lost."""

    gone = (*GONE, ConnectionLost, TimeoutError)

    def __init__(self, transport: Transport, url: str, name: str, timeout: float, confirm: bool):
        super().__init__(transport, (url,), name, per_url=timeout)
        self._confirm = confirm

    async def open(self, url: str, timeout: float) -> Worker:
        worker = Worker(url, self.name, timeout, self._gone)
        await asyncio.wrap_future(worker.open(self._confirm))
        return worker

    def is_open(self, conn: Worker) -> bool:
        return conn.is_alive() and not conn.stopping

    async def shut(self, conn: Worker) -> None:
        conn.stop()
        await asyncio.get_running_loop().run_in_executor(None, conn.join, link.SHUT_WITHIN)

    def explain(self, url: str, exc: BaseException, timeout: float) -> str:
        return explain(url, exc, timeout)

    def _gone(self, worker: Worker, failure: BaseException) -> None:
        self.lost(describe(failure), worker)

    def submit(self, work: Work) -> asyncio.Future[Any]:
        """Run ``work(worker)`` on the current connection's thread; await its result."""
        worker = self.connection
        if worker is None:
            done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            done.set_exception(ConnectionLost(f"{self.name}: {self.down_reason}"))
            return done
        return worker.submit(work)


class Worker(threading.Thread):
    """A thread owning one connection: runs submitted work, drains events in between."""

    def __init__(
        self,
        url: str,
        name: str,
        connect_timeout: float,
        on_gone: Callable[[Worker, BaseException], None] | None = None,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self._kwargs = connection_kwargs(url, connect_timeout)
        self._kwargs["client_properties"] = {"connection_name": name}
        self._work: queue.SimpleQueue[Item | None] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._opened: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._on_gone = on_gone
        self._loop: asyncio.AbstractEventLoop | None = None
        self.conn: pyamqp.Connection | None = None
        #: the publishing channel and the exchanges declared on it (this thread's only)
        self.channel: Any = None
        self.exchanges: set[str] = set()
        self._consuming = False
        self._after_drain: list[Callable[[], None]] = []
        self._waiting = select.poll()  # the connection's socket, once consuming

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def open(self, confirm: bool = False) -> concurrent.futures.Future[None]:
        """Start the thread; the future resolves once connected (or with the failure).

        ``confirm``: every publish on this connection waits for the broker's ack.
        """
        self._kwargs["confirm_publish"] = confirm
        self._loop = asyncio.get_running_loop()
        self.start()
        return self._opened

    def submit(self, work: Work) -> asyncio.Future[Any]:
        """Run ``work(self)`` on this thread; await its result (call on the loop)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        if self._stopping.is_set():
            done.set_exception(ConnectionLost("the pyamqp connection is closed"))
        else:
            self._work.put((work, done, loop))
        return done

    def consuming(self, after_drain: Callable[[], None] | None = None) -> None:
        """From now on drain broker events between pieces of work (called on this thread).

        ``after_drain`` runs on this thread once the deliveries waiting have been read
        (up to :data:`BATCH`): callbacks collect deliveries, the hook hands them over.
        """
        if after_drain is not None:
            self._after_drain.append(after_drain)
        if not self._consuming:
            self._consuming = True
            assert self.conn is not None
            # as the reference loop drains: a blocking read bounded by SO_RCVTIMEO, where
            # drain_events(timeout=) switches the socket's mode around every frame
            receive_timeout(self.conn, POLL)
            self._waiting.register(self.conn.sock, select.POLLIN)

    def stop(self) -> None:
        self._stopping.set()
        self._work.put(None)

    def run(self) -> None:
        try:
            conn = pyamqp.Connection(**self._kwargs)
            conn.connect()
        except Exception as exc:  # noqa: BLE001 - reported through the future
            self._opened.set_exception(exc)
            return
        self.conn = conn
        self._opened.set_result(None)
        failure: BaseException | None = None
        try:
            while not self._stopping.is_set():
                self._run_work(conn)
                if self._consuming:
                    self._drain(conn)
        except Exception as exc:  # noqa: BLE001 - the connection is gone: fail what waits
            failure = exc
        self._finish(conn, failure)

    def _drain(self, conn: pyamqp.Connection) -> None:
        """Read what the broker sent (waiting up to POLL for the first), then run the hooks."""
        try:
            conn.drain_events()
            for _ in range(BATCH - 1):
                if not self._waiting.poll(0):
                    break
                conn.drain_events()
        except TimeoutError:
            pass  # a quiet socket (SO_RCVTIMEO): look at the work queue again
        for hook in self._after_drain:
            hook()

    def _run_work(self, conn: pyamqp.Connection) -> None:
        block = not self._consuming
        settled: Settled = []
        loop: asyncio.AbstractEventLoop | None = None
        try:
            while True:
                try:
                    item = self._work.get(block=block, timeout=POLL if block else None)
                except queue.Empty:
                    return
                if item is None:
                    return
                work, done, loop = item
                if done.cancelled():  # its caller gave up before it ran
                    continue
                try:
                    settled.append((done, work(self), None))
                except GONE as e:
                    settled.append((done, None, e))
                    raise
                except Exception as exc:  # noqa: BLE001 - the caller gets it
                    settled.append((done, None, exc))
                block = False
        finally:
            if settled:
                assert loop is not None
                _post(loop, settled)

    def _finish(self, conn: pyamqp.Connection, failure: BaseException | None) -> None:
        lost = ConnectionLost(
            "the pyamqp connection closed"
            if failure is None
            else f"the connection to the broker was lost: {describe(failure)}"
        )
        self._stopping.set()  # from now on submit() fails at once
        self._fail_queued(lost)
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                # what the loop queued before it saw the flag, failed on the loop's side
                self._loop.call_soon_threadsafe(self._fail_queued, lost)
                if failure is not None and self._on_gone is not None:
                    self._loop.call_soon_threadsafe(self._on_gone, self, failure)
        with contextlib.suppress(Exception):
            if failure:
                conn.collect()
            else:
                if self._consuming:
                    receive_timeout(conn, 0.0)  # the close waits for the broker's close-ok
                conn.close()

    def _fail_queued(self, lost: ConnectionLost) -> None:
        while True:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                _post(item[2], [(item[1], None, lost)])


def _post(loop: asyncio.AbstractEventLoop, settled: Settled) -> None:
    """Settle every future in ``settled`` on ``loop``: one wake-up for all of them."""
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits them
        loop.call_soon_threadsafe(_settle, settled)


def _settle(settled: Settled) -> None:
    for done, result, exc in settled:
        if done.done():
            continue  # cancelled while the thread ran it
        if exc is not None:
            done.set_exception(exc)
        else:
            done.set_result(result)


def receive_timeout(conn: pyamqp.Connection, seconds: float) -> None:
    """Bound each blocking receive on ``conn`` to ``seconds`` (0: unbounded), as py-amqp's
    ``read_timeout`` does at connect (the socket stays in blocking mode)."""
    whole = int(seconds)
    tv = struct.pack("ll", whole, int((seconds - whole) * 1_000_000))
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)


@dataclass(frozen=True, slots=True)
class Channel:
    """A py-amqp channel as :class:`mqlab.sdk.amqp.BlockingDeclaringChannel` (called on its
    link's thread); the declare and clean-up sequences are the SDK's."""

    channel: Any

    def declare_exchange(self, decl: topology.ExchangeDecl) -> None:
        self.channel.exchange_declare(
            decl.name, decl.type, durable=decl.durable, auto_delete=decl.auto_delete
        )

    def declare_queue(self, decl: topology.QueueDecl) -> None:
        self.channel.queue_declare(
            decl.name,
            durable=decl.durable,
            exclusive=decl.exclusive,
            auto_delete=decl.auto_delete,
            arguments=decl.argument_map(),
        )

    def bind(self, queue: str, exchange: str, key: str) -> None:
        self.channel.queue_bind(queue, exchange, key)


def delete_declared(conn: pyamqp.Connection, noted: topology.Declared) -> None:
    """Delete what ``noted`` holds, each if unused: in use (406), the broker closes the
    channel, and the next deletion opens another."""
    left = topology.delete_unused_blocking(conn.channel, noted, (amqp_exc.ChannelError,))
    if left is not None:
        left.close()
