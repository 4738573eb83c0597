"""oslo.messaging's own ceiling for cast: an RPC server and ``RPCClient.cast`` in a loop.

The thinnest use of oslo.messaging for a cast, configured as the plugin configures
it (:func:`mqlab_oslo.config.make_conf`: a private ``ConfigOpts``, no file read,
the plugin's ``threads``, ``heartbeat``, ``prefetch`` and ``amqp_durable_queues``
passed through; its ``retry`` given to the client), without any of mqlab: the
consumer is ``get_rpc_server`` on the threading executor (oslo 18's default) with
one endpoint whose method only counts; the publisher calls ``cast`` in a tight loop
with one string argument of ``spec.size`` characters, as the plugin sends a body.
oslo acks every message it takes, and waits for a publisher confirm on every
publish (kombu's ``confirm_publish``, set by its rabbit driver, no option turns it
off): the plugin's casts and the loop's both do, RabbitMQ PerfTest's do not.

One thread casts, although the plugin keeps ``threads`` casts in flight: on a busy
2-CPU machine one thread casting alone spent about 350 µs of CPU a cast and sent
1,800 to 1,950 a second; more casters mostly added GIL contention (four: about
430 µs a cast, 2,240 a second; sixteen: about 650 µs, 1,400 to 1,500), and a server
they outran received less, not more. Four rounds of 3 s each there: one caster kept
pace with the server, which received 1,516 to 1,715 msg/s; behind four casters it
received 965 to 1,163; behind sixteen, 1,218 to 1,834.

oslo's rabbit driver declares what it needs from the topic and the exchange, which
the loop names after ``spec.name``: a topic exchange, the queues ``<topic>`` and
``<topic>.<server>`` (neither auto-deleted, both outlive the server), and a fanout
exchange and queue (the queue deleted by oslo when the server's connection closes,
the exchange auto-deleted with it). The loop deletes the first three itself once
oslo is done, as the plugin does at close; the publisher deletes the exchange too,
in case its connection redeclared it after the consumer had deleted it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

from mqlab.sdk import amqp
from mqlab.sdk.reference import ReferenceLoop, Tally
from mqlab_oslo.config import make_conf, oslo_messaging, transport_url
from mqlab_oslo.transport import METHOD, _delete, _probe

#: seconds between two looks at ``tally.stop`` while oslo's threads consume
TICK = 0.1
#: the RPC server's name: its own queue is ``<topic>.<SERVER>``
SERVER = "reference"
#: seconds the broker check and the clean-up may take to connect
CLEANUP_TIMEOUT = 5.0


class _Endpoint:
    """The RPC method the publisher casts to: it counts, nothing else.

    oslo's executor threads call it concurrently; the increment needs no lock under
    CPython's GIL (no bytecode of ``n += 1`` on an attribute lets another thread in:
    16 threads lost none of 3.2 million at a 1 µs switch interval, on 3.11 to 3.13).
    """

    def __init__(self, tally: Tally) -> None:
        self.tally = tally

    def mqlab(self, ctxt: Any, body: str) -> None:
        self.tally.n += 1


class OsloReference(ReferenceLoop):
    library: ClassVar[str] = "oslo.messaging"

    @classmethod
    def auto_ack(cls, options: Mapping[str, Any]) -> bool:
        return False  # oslo acks every message its server takes

    @classmethod
    def describe(cls, options: Mapping[str, Any]) -> str:
        return "ack each message, confirm each cast"

    def _transport(self) -> Any:
        # oslo retries a connection forever: fail at once, as the plugin's start() does,
        # when the broker does not answer
        _probe(self.spec.urls[0], CLEANUP_TIMEOUT)
        conf = make_conf(self.spec.options, self.spec.name)  # control exchange: spec.name
        return oslo_messaging.get_rpc_transport(conf, url=transport_url(self.spec.urls[:1]))

    def _target(self, server: str | None = None) -> Any:
        name = self.spec.name
        return oslo_messaging.Target(exchange=name, topic=name, server=server)

    def consume(self, tally: Tally, ready: Callable[[str], None]) -> None:
        name = self.spec.name
        transport = self._transport()
        with self._cleaned(transport, queues=(name, f"{name}.{SERVER}")):
            server = oslo_messaging.get_rpc_server(
                transport, self._target(SERVER), [_Endpoint(tally)]
            )
            server.start()  # declares and consumes before it returns
            try:
                ready("")
                while not tally.stop:
                    time.sleep(TICK)
            finally:
                server.stop()
                server.wait()  # the executor's threads are done, the listener closed

    def publish(self, tally: Tally) -> None:
        retry: int | None = self.spec.options["retry"]
        transport = self._transport()
        with self._cleaned(transport, queues=()):
            client = oslo_messaging.get_rpc_client(
                transport, self._target(), retry=None if retry is None or retry < 0 else retry
            )
            cast, body = client.cast, self.spec.body.decode("latin-1")
            while not tally.stop:
                try:
                    cast({}, METHOD, body=body)
                except oslo_messaging.MessagingException:
                    if tally.stop:  # after the window, the consumer may be gone already
                        break
                    raise
                tally.n += 1

    @contextlib.contextmanager
    def _cleaned(self, transport: Any, queues: tuple[str, ...]) -> Iterator[None]:
        """Release ``transport``, then delete ``queues`` and the loop's exchange. After a
        failure the clean-up's own errors are dropped, so the first one is the one told."""
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):
                self._clean(transport, queues)
            raise
        self._clean(transport, queues)

    def _clean(self, transport: Any, queues: tuple[str, ...]) -> None:
        transport.cleanup()
        # oslo leaves the topic queues and the topic exchange (as a service's stay for its
        # next start); the publisher's connection may also have redeclared the exchange
        # after the consumer deleted it: each side deletes it once unbound
        doomed = amqp.Declared()
        for queue in queues:
            doomed.queue(amqp.QueueDecl(queue, durable=False, auto_delete=False, exclusive=False))
        name = self.spec.name
        doomed.exchange(amqp.ExchangeDecl(name, "topic", durable=False, auto_delete=False))
        _delete(self.spec.urls[0], doomed, CLEANUP_TIMEOUT)  # each if unused, as the plugin's
