"""py-amqp's own ceiling for cast: one blocking connection per side, one thread each.

The thinnest use of py-amqp as the plugin uses it (``amqp.Connection`` opened as
:func:`mqlab_pyamqp.link.connection_kwargs` opens it, heartbeats off), without any
of mqlab: ``basic_publish`` to the default exchange in a tight loop on a channel
without publisher confirms, and one ``basic_consume`` under the plugin's prefetch
whose callback counts and acks each delivery (the plugin has no no-ack mode).

The consumer drains with a blocking ``drain_events()`` on a socket given a receive
timeout (``SO_RCVTIMEO``, the option py-amqp's own ``read_timeout`` sets), so that
a quiet socket raises ``socket.timeout`` every ``TICK`` and the loop sees
``tally.stop``. ``drain_events(timeout=TICK)``, as the plugin's threads drain, makes
the socket non-blocking and back again around every frame, with a ``poll`` before
each ``recv``: draining 60,000 deliveries, it cost about a third more CPU per
delivery (63 against 46 µs, the mean of five runs each, on a busy 2-CPU machine):
the plugin's way of draining, not the library's ceiling. The timeout is set once
consuming: set at connect (``read_timeout``), it would also bound the broker's
answers to the declare and the consume; it is cleared before the close for the
same reason.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

import amqp as pyamqp

from mqlab.sdk.reference import ReferenceLoop, Tally
from mqlab_pyamqp.link import connection_kwargs, receive_timeout
from mqlab_pyamqp.transport import CONNECT_TIMEOUT

#: seconds a quiet consumer waits for a frame before it looks at ``tally.stop``
TICK = 0.1


class PyamqpReference(ReferenceLoop):
    library: ClassVar[str] = "amqp"

    @classmethod
    def auto_ack(cls, options: Mapping[str, Any]) -> bool:
        return False  # the plugin acks every delivery after its handler

    @classmethod
    def confirms(cls, options: Mapping[str, Any]) -> str | None:
        return "confirm = true" if options["confirm"] else None

    def consume(self, tally: Tally, ready: Callable[[str], None]) -> None:
        prefetch = int(self.spec.options["prefetch"])
        with self._connection("consume") as conn:
            channel = conn.channel()
            channel.queue_declare(self.spec.name, auto_delete=True)
            if prefetch:
                channel.basic_qos(0, prefetch, False)
            ack = channel.basic_ack

            def on_message(message: pyamqp.Message) -> None:
                tally.n += 1
                ack(message.delivery_tag)

            channel.basic_consume(self.spec.name, callback=on_message)
            receive_timeout(conn, TICK)
            ready("")
            drain = conn.drain_events
            while not tally.stop:
                try:  # noqa: SIM105 - a try costs nothing; suppress() is two calls per drain
                    drain()
                except TimeoutError:
                    pass  # a quiet socket: look at the tally
            receive_timeout(conn, 0.0)

    def publish(self, tally: Tally) -> None:
        with self._connection("publish") as conn:
            publish = conn.channel().basic_publish
            message, name = pyamqp.Message(self.spec.body), self.spec.name
            while not tally.stop:
                publish(message, exchange="", routing_key=name)
                tally.n += 1

    @contextlib.contextmanager
    def _connection(self, role: str) -> Iterator[pyamqp.Connection]:
        """A connection, closed at the end; after a failure only released (as the plugin's
        links do: the connection may be gone), so the failure is the error told."""
        kwargs = connection_kwargs(self.spec.urls[0], CONNECT_TIMEOUT)
        # named after the loop, so that a connection left open shows under its name
        kwargs["client_properties"] = {"connection_name": f"{self.spec.name} {role}"}
        conn = pyamqp.Connection(**kwargs)
        conn.connect()
        try:
            yield conn
        except BaseException:
            with contextlib.suppress(Exception):
                conn.collect()
            raise
        conn.close()
