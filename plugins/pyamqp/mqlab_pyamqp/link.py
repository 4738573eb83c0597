"""One py-amqp connection owned by one thread, as seed 002's ``Pyamqp_Threads`` runs it.

py-amqp is blocking and not thread-safe: a connection and its channels belong
to the thread that opened them. So each :class:`Link` is a thread with its own
connection. Other threads (the event loop's) hand it work through a queue and
get a ``concurrent.futures.Future`` back; between pieces of work the thread
drains the connection's events (deliveries, confirms), so one thread both
publishes and consumes. Nothing reconnects: a lost connection fails the work
queued on it, as :class:`mqlab.errors.ConnectionLost`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import queue
import socket
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any

import amqp as pyamqp
from amqp import exceptions as amqp_exc

from mqlab import amqp as topology
from mqlab.errors import ConnectFailed, ConnectionLost, DriverError

#: seconds the thread waits for broker events before it looks at its work queue again
#: (work wakes it at once; this only bounds how late it notices a stop)
POLL = 0.05

Work = Callable[[pyamqp.Connection], Any]


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


def describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def mapped(exc: BaseException) -> BaseException:
    """A py-amqp exception as mqlab's error (the caller chains it with ``from``)."""
    if isinstance(exc, amqp_exc.ChannelError):
        return DriverError(f"the broker refused: {describe(exc)}")
    if isinstance(exc, OSError | amqp_exc.ConnectionError | amqp_exc.RecoverableConnectionError):
        return ConnectionLost(f"the connection to the broker was lost: {describe(exc)}")
    return exc


class Link(threading.Thread):
    """A thread owning one connection: runs submitted work, drains events in between."""

    def __init__(self, url: str, name: str, connect_timeout: float) -> None:
        super().__init__(name=name, daemon=True)
        self._kwargs = connection_kwargs(url, connect_timeout)
        self._kwargs["client_properties"] = {"connection_name": name}
        self._work: queue.SimpleQueue[tuple[Work, concurrent.futures.Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._stopping = threading.Event()
        self._opened: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.conn: pyamqp.Connection | None = None
        #: the publishing channel and the exchanges declared on it (this thread's only)
        self.channel: Any = None
        self.exchanges: set[str] = set()
        self._consuming = False

    def open(self, confirm: bool = False) -> concurrent.futures.Future[None]:
        """Start the thread; the future resolves once connected (or with the failure).

        ``confirm``: every publish on this connection waits for the broker's ack.
        """
        self._kwargs["confirm_publish"] = confirm
        self.start()
        return self._opened

    def submit(self, work: Work) -> concurrent.futures.Future[Any]:
        """Run ``work(connection)`` on this thread; its result or exception comes back."""
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        if self._stopping.is_set():
            done.set_exception(ConnectionLost("the pyamqp link is closed"))
        else:
            self._work.put((work, done))
        return done

    def consuming(self) -> None:
        """From now on drain broker events between pieces of work (called on this thread)."""
        self._consuming = True

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
                    with contextlib.suppress(socket.timeout):
                        conn.drain_events(timeout=POLL)
        except Exception as exc:  # noqa: BLE001 - the connection is gone: fail what waits
            failure = exc
        self._finish(conn, failure)

    def _run_work(self, conn: pyamqp.Connection) -> None:
        block = not self._consuming
        while True:
            try:
                item = self._work.get(block=block, timeout=POLL if block else None)
            except queue.Empty:
                return
            if item is None:
                return
            work, done = item
            if not done.set_running_or_notify_cancel():
                continue
            try:
                done.set_result(work(conn))
            except (OSError, amqp_exc.ConnectionError, amqp_exc.RecoverableConnectionError) as e:
                done.set_exception(e)
                raise
            except Exception as exc:  # noqa: BLE001 - the caller gets it
                done.set_exception(exc)
            block = False

    def _finish(self, conn: pyamqp.Connection, failure: BaseException | None) -> None:
        lost = ConnectionLost(
            "the pyamqp link closed"
            if failure is None
            else f"the connection to the broker was lost: {describe(failure)}"
        )
        while True:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                break
            if item is not None and item[1].set_running_or_notify_cancel():
                item[1].set_exception(lost)
        with contextlib.suppress(Exception):
            conn.collect() if failure else conn.close()


def declare_exchange(channel: Any, decl: topology.ExchangeDecl, noted: topology.Declared) -> None:
    if decl.name == topology.DEFAULT_EXCHANGE:
        return
    channel.exchange_declare(
        decl.name, decl.type, durable=decl.durable, auto_delete=decl.auto_delete
    )
    noted.exchange(decl)


def declare_queue(channel: Any, decl: topology.QueueDecl, noted: topology.Declared) -> None:
    channel.queue_declare(
        decl.name,
        durable=decl.durable,
        exclusive=decl.exclusive,
        auto_delete=decl.auto_delete,
        arguments=decl.argument_map(),
    )
    noted.queue(decl)
    for exchange, key in decl.bindings:
        channel.queue_bind(decl.name, exchange, key)


def delete_declared(conn: pyamqp.Connection, noted: topology.Declared) -> None:
    """Delete what ``noted`` holds, each if unused (a refused delete closes its channel)."""
    for gone in noted.deletions():
        channel = conn.channel()
        try:
            if gone.kind == "queue":
                channel.queue_delete(gone.name, if_unused=True)
            else:
                channel.exchange_delete(gone.name, if_unused=True)
            channel.close()
        except amqp_exc.ChannelError:
            continue  # in use (406): another worker deletes it last
    noted.forget()
