"""The transport's one AMQP 1.0 connection, made again when it is lost.

:class:`Amqp1Link` is the SDK's self-healing :class:`mqlab.sdk.link.Link` on an
:class:`~mqlab_amqp1.connection.Amqp1Connection`. The engine runs on the asyncio loop
(no thread of its own), so the SDK's loop fits as it is: the connection's "lost"
callback, which pyngus' callbacks and the socket's end call on the loop, is
:meth:`Link.lost`; opening is the handshake and the reply sender's attach (RabbitMQ
refuses a wrong vhost only at the first link); restoring declares every queue again and
attaches every receiver again (:meth:`mqlab_amqp1.linkset.LinkSet.restore`).
"""

from __future__ import annotations

from collections.abc import Callable

from mqlab.errors import ConnectFailed, TransportError
from mqlab.sdk.link import Link
from mqlab.transport import Transport
from mqlab_amqp1.connection import Amqp1Connection
from mqlab_amqp1.linkset import LinkSet, attached
from mqlab_amqp1.topology import Topology
from mqlab_amqp1.url import parse_url

#: bound on the AMQP handshake (attach: :mod:`mqlab_amqp1.linkset`)
CONNECT_TIMEOUT = 10.0
#: bound on the polite close, within the SDK's bound on a link's (``SHUT_WITHIN``)
CLOSE_TIMEOUT = 1.5


class Amqp1Link(Link[Amqp1Connection]):
    """A connection to the first URL that answers; lost, it is reported once, made again
    from the next URL with back-off and restored before sends use it."""

    def __init__(
        self,
        transport: Transport,
        links: LinkSet,
        topology: Topology,
        *,
        container: str,
        mechanisms: str,
        on_lost: Callable[[TransportError], None],
    ) -> None:
        """``on_lost(error)``: what else fails with a lost connection (the calls waiting)."""
        urls = transport.urls
        super().__init__(
            transport, urls, f"mqlab-amqp1 {transport.config.worker}",
            per_url=CONNECT_TIMEOUT, budget=CONNECT_TIMEOUT * len(urls),
        )  # fmt: skip
        self._links = links
        self._topology = topology
        self._container = container
        self._mechanisms = mechanisms
        self._on_lost = on_lost

    async def open(self, url: str, timeout: float) -> Amqp1Connection:
        broker = parse_url(url)

        def gone(error: TransportError, why: str) -> None:
            self._on_lost(error)
            self.lost(why, conn)  # reported, and made again if it was the current one

        conn = Amqp1Connection(broker, self._container, self._mechanisms, gone)
        try:
            await conn.connect(timeout)
            # RabbitMQ opens the connection whatever the vhost and refuses at the first
            # link: attach the reply sender now, to fail here and not at the first reply
            node = self._links.addressing.reply_sender
            reply = conn.sender(node.address, node.capability)
            await attached(reply)
        except BaseException:
            await conn.close(CLOSE_TIMEOUT)
            raise
        self._links.adopt_reply_sender(reply)
        return conn

    async def shut(self, conn: Amqp1Connection) -> None:
        await conn.close(CLOSE_TIMEOUT)

    def is_open(self, conn: Amqp1Connection) -> bool:
        return conn.error is None and conn.pyngus is not None

    def explain(self, url: str, exc: BaseException, timeout: float) -> str:
        if isinstance(exc, TimeoutError):
            return f"no AMQP 1.0 answer within {timeout:g}s (is this an AMQP 1.0 listener?)"
        if isinstance(exc, ConnectFailed):
            return str(exc)
        # refused at the first link: the vhost or the user's rights
        return f"{exc} (check the vhost and the user's permissions)"

    async def restore(self, conn: Amqp1Connection) -> None:
        await self._topology.moved(conn.url)
        await self._links.restore(conn)
