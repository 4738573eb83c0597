"""Declare the oslo-style topology over AMQP 0-9-1, because AMQP 1.0 cannot.

RabbitMQ 3.x's AMQP 1.0 plugin sends to existing exchanges and consumes from
existing queues, but it cannot declare an exchange or bind a queue, and the
queues it declares itself (``/queue/NAME`` addresses) are never auto-deleted
and clash with the arguments the 0-9-1 drivers use. So the receiving side
declares exactly what :mod:`mqlab.sdk.amqp` prescribes through one small 0-9-1
connection (same host, port, credentials and vhost), then consumes over AMQP
1.0. No message ever travels over this connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import aiormq
import aiormq.abc
from aiormq import exceptions as amqp_errors

from mqlab.errors import ConnectFailed, ConnectionLost, DriverError, map_errors
from mqlab.sdk import amqp
from mqlab.sdk.amqp import Declared, ExchangeDecl, QueueDecl
from mqlab_amqp1.url import BrokerUrl

#: bound on every 0-9-1 round trip: declarations are tiny
TIMEOUT = 10.0
#: seconds the deletions at close may take (the transport's close is bounded)
CLEAN_UP_BUDGET = 2.5


class Topology:
    """Declares exchanges, queues and bindings; opens its connection on first use.

    ``url``: the broker the AMQP 1.0 connection is on (:meth:`moved` follows it).
    """

    def __init__(self, url: BrokerUrl | None = None) -> None:
        self._url = url
        self._conn: aiormq.abc.AbstractConnection | None = None
        self._channel: aiormq.abc.AbstractChannel | None = None
        self._lock = asyncio.Lock()
        self._exchanges: set[str] = set()
        self._created = Declared()  # deleted at close

    async def moved(self, url: BrokerUrl) -> None:
        """The AMQP 1.0 connection is (again) on ``url``: declare there from now on, every
        exchange once more (a restarted broker lost the transient ones)."""
        self._exchanges.clear()
        if url == self._url:
            return
        self._url = url
        conn, self._conn, self._channel = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await conn.close()

    async def _ready(self) -> aiormq.abc.AbstractChannel:
        if self._channel is not None and not self._channel.is_closed:
            return self._channel
        url = self._url
        if url is None:
            raise DriverError("nothing to declare on: the amqp1 transport is not connected")
        try:
            async with asyncio.timeout(TIMEOUT):
                if self._conn is None or self._conn.is_closed:
                    self._conn = await aiormq.connect(
                        url.amqp091, client_properties={"connection_name": "mqlab-amqp1-topology"}
                    )
                self._channel = await self._conn.channel()
        except amqp_errors.ProbableAuthenticationError as exc:
            raise ConnectFailed(f"on AMQP 0-9-1: {amqp.login_refused(url.amqp091)}") from exc
        except TimeoutError as exc:
            raise ConnectFailed(
                f"cannot open the AMQP 0-9-1 topology connection to {url.masked} "
                f"within {TIMEOUT:g}s"
            ) from exc
        except (OSError, amqp_errors.AMQPError) as exc:
            raise ConnectFailed(
                f"cannot open the AMQP 0-9-1 topology connection to {url.masked}: {exc} "
                "(the amqp1 plugin declares exchanges and queues over AMQP 0-9-1)"
            ) from exc
        return self._channel

    async def exchange(self, decl: ExchangeDecl) -> None:
        """Declare ``decl`` once per transport."""
        if decl.name in self._exchanges:
            return
        async with self._lock:
            channel = await self._ready()
            what = f"exchange {decl.name!r}"
            with self._mapped(what):
                await channel.exchange_declare(
                    decl.name,
                    exchange_type=decl.type,
                    durable=decl.durable,
                    auto_delete=decl.auto_delete,
                    timeout=TIMEOUT,
                )
            self._exchanges.add(decl.name)
            self._created.exchange(decl)

    async def queue(self, decl: QueueDecl) -> None:
        """Declare ``decl`` and its bindings (declaring an existing queue is a no-op)."""
        async with self._lock:
            channel = await self._ready()
            with self._mapped(f"queue {decl.name!r}"):
                await channel.queue_declare(
                    decl.name,
                    durable=decl.durable,
                    auto_delete=decl.auto_delete,
                    exclusive=decl.exclusive,
                    arguments=decl.argument_map(),
                    timeout=TIMEOUT,
                )
                self._created.queue(decl)
                for exchange, key in decl.bindings:
                    await channel.queue_bind(decl.name, exchange, key, timeout=TIMEOUT)

    async def delete_unused(self, name: str) -> None:
        """Best effort: delete queue ``name`` unless someone consumes from it."""
        with contextlib.suppress(Exception):
            async with self._lock:
                channel = await self._ready()
                await channel.queue_delete(name, if_unused=True, timeout=TIMEOUT)

    async def close(self) -> None:
        """Delete what was declared (if unused), close the 0-9-1 connection; never raises.

        Call it after the AMQP 1.0 receivers are gone, or their queues are in use and stay.
        """
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLEAN_UP_BUDGET):
                # in use -> precondition failed closes the channel; _ready opens another
                await amqp.delete_unused(self._ready, self._created, (Exception,))
        self._created.forget()
        conn, self._conn, self._channel = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await conn.close()

    @contextlib.contextmanager
    def _mapped(self, what: str) -> Iterator[None]:
        try:
            with _map_declare_errors(what, self._url.masked if self._url else "no broker"):
                yield
        except ConnectionLost:
            # not trusted again: the next declaration opens a new connection
            self._conn, self._channel = None, None
            raise


@contextlib.contextmanager
def _map_declare_errors(what: str, where: str) -> Iterator[None]:
    with map_errors(
        [
            (
                amqp_errors.ChannelPreconditionFailed,
                lambda e: DriverError(
                    f"{what} on {where} exists with other arguments ({_reply_text(e)}); "
                    "delete it or use another topic/exchange name"
                ),
            ),
            (
                amqp_errors.ChannelAccessRefused,
                lambda e: DriverError(
                    f"cannot declare {what} on {where}: access refused ({_reply_text(e)}); "
                    "check the user's permissions"
                ),
            ),
            (
                amqp_errors.ChannelLockedResource,
                lambda e: DriverError(
                    f"{what} on {where} is exclusive to another connection ({_reply_text(e)}); "
                    "use another name"
                ),
            ),
            (
                TimeoutError,
                lambda e: DriverError(
                    f"declaring {what} on {where}: no answer within {TIMEOUT:g}s"
                ),
            ),
            (
                # the 0-9-1 connection went with the broker (a restart, a cut): made again
                # on the next declaration, as the AMQP 1.0 one is
                (OSError, amqp_errors.ChannelInvalidStateError),
                lambda e: ConnectionLost(f"declaring {what} on {where}: connection lost ({e})"),
            ),
            (
                amqp_errors.AMQPError,
                lambda e: DriverError(f"declaring {what} on {where} failed: {e}"),
            ),
        ]
    ):
        yield


def _reply_text(exc: BaseException) -> str:
    # aiormq puts (code, text) or a frame in args; keep only the broker's text
    for arg in exc.args:
        text = getattr(arg, "reply_text", None) or (arg if isinstance(arg, str) else None)
        if text:
            return str(text)
    return str(exc) or type(exc).__name__
