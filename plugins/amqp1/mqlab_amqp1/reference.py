"""python-qpid-proton's own ceiling for cast: its reactor, a sender and a receiver.

The thinnest use of proton: a ``Container`` with one ``MessagingHandler`` per
side. The receiver takes messages with the plugin's credit window, pre-settled
when the plugin consumes casts pre-settled (``presettled`` holds ``cast``), else
accepting each. The publisher keeps ``WINDOW`` unsettled messages in flight (no more than the
step's senders when the plugin's casts are settled: each waits for its outcome) and
sends another as each outcome arrives: a publisher that never waits (pre-settled
sends) starved the consumer of the same queue entirely on RabbitMQ 3.10 (0
messages received in 5 s while 11,000/s went in), which is no ceiling at all.
On RabbitMQ the queue is declared over AMQP 0-9-1 first, as the plugin does
(RabbitMQ's AMQP 1.0 plugin cannot declare an auto-deleted queue); on Artemis
(``broker = "artemis"``) both links name an anycast address, which Artemis
creates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import aiormq
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import AtMostOnce, Container, LinkOption

from mqlab.sdk.reference import ReferenceLoop, Tally
from mqlab_amqp1.addressing import ANYCAST
from mqlab_amqp1.links import set_capability
from mqlab_amqp1.url import parse_url

#: seconds between two looks at ``tally.stop``
TICK = 0.1
#: unsettled messages the publisher keeps in flight (the plugin's default credit)
WINDOW = 100


class _Anycast(LinkOption):
    """Artemis: the link's node is a queue (anycast), whichever end it is."""

    def apply(self, link: Any) -> None:
        set_capability(link.source if link.is_receiver else link.target, ANYCAST)


class _Side(MessagingHandler):
    """Opens one link on one connection; closes it once the tally says stop."""

    def __init__(self, ref: Amqp1Reference, tally: Tally, receive: bool, prefetch: int) -> None:
        super().__init__(prefetch=prefetch, auto_accept=True)
        self.ref, self.tally, self.receive = ref, tally, receive
        self.ready: Callable[[str], None] | None = None
        self.conn: Any = None
        self.sender: Any = None
        self.unsettled = 0
        # a settled cast of the plugin waits for its outcome, one per step's sender: no more
        # unsettled than those; pre-settled ones wait for nothing, and WINDOW holds
        presettled = "cast" in ref.spec.options["presettled"]
        self.window = WINDOW if presettled else ref.in_flight(WINDOW)

    def on_start(self, event: Any) -> None:
        url = parse_url(self.ref.spec.urls[0])
        self.conn = event.container.connect(
            f"amqp://{url.host}:{url.port}", user=url.user, password=url.password,
            allowed_mechs="PLAIN", virtual_host=url.amqp_hostname,
        )  # fmt: skip
        name = self.ref.spec.name
        artemis = self.ref.spec.options["broker"] == "artemis"
        address = name if artemis else f"/amq/queue/{name}"
        options: list[Any] = [_Anycast()] if artemis else []
        if self.receive:
            if self.ref.auto_ack(self.ref.spec.options):
                options.append(AtMostOnce())
            event.container.create_receiver(self.conn, address, options=options)
        else:
            self.sender = event.container.create_sender(self.conn, address, options=options)
        event.container.schedule(TICK, self)

    def on_link_opened(self, event: Any) -> None:
        if self.ready is not None and event.receiver is not None:
            self.ready("")
            self.ready = None

    def on_timer_task(self, event: Any) -> None:
        if self.tally.stop:
            self.conn.close()
        else:
            event.container.schedule(TICK, self)

    def on_message(self, event: Any) -> None:
        self.tally.n += 1

    def on_sendable(self, event: Any) -> None:
        self._send()

    def on_settled(self, event: Any) -> None:
        self.unsettled -= 1
        self._send()

    def _send(self) -> None:
        sender, message, tally = self.sender, Message(body=self.ref.spec.body), self.tally
        while sender.credit and self.unsettled < self.window and not tally.stop:
            sender.send(message)
            self.unsettled += 1
            tally.n += 1


class Amqp1Reference(ReferenceLoop):
    library: ClassVar[str] = "python-qpid-proton"

    @classmethod
    def auto_ack(cls, options: Mapping[str, Any]) -> bool:
        return "cast" in options["presettled"]

    def consume(self, tally: Tally, ready: Callable[[str], None]) -> None:
        if self.spec.options["broker"] != "artemis":
            asyncio.run(self._declare())
        side = _Side(self, tally, True, int(self.spec.options["credit"]))
        side.ready = ready
        Container(side).run()

    def publish(self, tally: Tally) -> None:
        Container(_Side(self, tally, False, 0)).run()

    async def _declare(self) -> None:
        conn = await aiormq.connect(parse_url(self.spec.urls[0]).amqp091)
        try:
            channel = await conn.channel()
            await channel.queue_declare(self.spec.name, auto_delete=True)
        finally:
            await conn.close()
