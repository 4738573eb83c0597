"""The ``nats`` transport: core NATS for RPC and notifications, JetStream for durable ones.

- call: NATS request/reply on a muxed inbox; nobody subscribed is the server's
  "no responders" status, so a call to nobody fails at once (``Undeliverable``);
- cast: a publish; with ``mandatory = true`` a request the server answers
  empty, so a cast to nobody fails too, at the cost of a round trip;
- the servers of a topic share it through a queue group; ``server=`` and
  fanout casts use their own subjects;
- notifications: a publish to a subject each pool subscribes to as a queue
  group; ``Target.durable`` ones go through a JetStream stream (publish acked
  by the server, one durable pull consumer per pool, acked after handling).

Core NATS is at-most-once: a subscriber that falls ``pending_messages``
behind is a slow consumer and the server or client drops what does not fit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import ClassVar

import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext

from mqlab.errors import ConnectionLost, DriverError, map_errors
from mqlab.sdk.connect import CONNECT_TIMEOUT, connect_first, explain
from mqlab.sdk.lifecycle import connection_lost
from mqlab.sdk.pending import call_timeout
from mqlab.sdk.targets import PerTarget
from mqlab.transport import Features, Handler, Option, Target, Transport, TransportConfig
from mqlab_nats import subjects
from mqlab_nats.errors import RULES

LOG = logging.getLogger(__name__)
#: bytes nats-py buffers for publishing before a publish waits for its flusher
PENDING_SIZE = 8 * 1024 * 1024
#: seconds a publish waits for that flusher once the buffer is past PENDING_SIZE
FLUSH_WITHIN = 5.0
#: durable notifications are pulled, each request waiting this long at the server; a
#: closing listener finishes its request instead of leaving one open. (A push consumer,
#: or a pull left open, had JetStream hand a notification published right after the
#: pool's only listener closed to that listener, for the next one only after ack_wait.)
PULL_WAIT = 0.5
#: notifications one pull request may bring
PULL_BATCH = 256


class NatsTransport(Transport):
    wire = "nats"
    url_schemes: ClassVar[Mapping[str, int | None]] = {"nats": 4222, "tls": 4222}
    features = Features(
        at_most_once=True,  # core NATS never redelivers
        mandatory=True,  # calls always; casts with mandatory = true
        durable=True,  # durable notifications through JetStream
        fanout=True,
        server="nats",
    )
    option_specs: ClassVar[Mapping[str, Option]] = {
        "connect_timeout": CONNECT_TIMEOUT,
        "reconnect_attempts": Option(
            (int,), 60, "reconnections tried after the connection drops", minimum=1
        ),
        "mandatory": Option(
            (bool,),
            False,
            "casts wait for the server's receipt, so a cast to nobody fails",
            feature="mandatory",
            needs=(True,),
        ),
        "cast_timeout": Option(
            (int, float), 10.0, "seconds a mandatory cast waits for its receipt", minimum=0.01
        ),
        "flush": Option(
            (bool,), False, "casts and notifications wait until the server has them (PING/PONG)"
        ),
        "pending_messages": Option(
            (int,),
            524288,
            "messages a subscription buffers before dropping (slow consumer)",
            minimum=1,
        ),
        "ack_wait": Option(
            (int, float),
            30.0,
            "JetStream: seconds before an unacked message is redelivered",
            minimum=0.1,
        ),
    }

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self.nc: Client | None = None
        self.js: JetStreamContext | None = None
        self._subs: list[Subscription] = []
        self._pulls: list[asyncio.Task[None]] = []  # each durable pool's pull loop
        self._closing = False
        self._streams: set[str] = set()
        self._last_error: BaseException | None = None
        self._url = ""  # the URL start() connected to (nats-py forgets it when it drops)
        self._drops = 0  # connections nats-py has lost so far: a flush can tell it met one
        # a cast's subject (a route and a regex per name), made once per target
        self._rpc_subject = PerTarget(subjects.rpc)
        self._mandatory = bool(self.options["mandatory"])
        self._flush = bool(self.options["flush"])

    # -- connection --------------------------------------------------------------

    async def start(self) -> None:
        index, nc = await connect_first(
            self.urls,
            self._open,
            self._explain,
            per_url=float(self.options["connect_timeout"]),
        )
        self.nc, self.js = nc, nc.jetstream()
        self._url = self.urls[index]

    async def _open(self, url: str, timeout: float) -> Client:
        nc = await nats.connect(
            servers=[url],
            name=f"mqlab-{self.config.worker}",
            connect_timeout=max(1, round(timeout)),
            # one attempt now (start() reports why it failed); the option's count once up
            max_reconnect_attempts=1,
            reconnect_time_wait=0.5,
            drain_timeout=2,
            error_cb=self._on_error,
            disconnected_cb=self._on_disconnected,
            pending_size=PENDING_SIZE,
            # A publish that finds more than pending_size buffered hands the flusher a
            # future and waits for it, by default without a timeout. When the connection
            # dies, the flusher task is cancelled and the futures queued behind the one it
            # was writing are never resolved (not even when nats-py gives up and closes):
            # every sender that was waiting there hangs for good. Bounded, the wait ends,
            # the message stays in the reconnect buffer like any publish made while
            # disconnected, and the next sends fail with ConnectionLost (buffer full, or
            # closed). On a live server this only lets a stalled flusher's backlog grow.
            flush_timeout=FLUSH_WITHIN,
        )
        nc.options["max_reconnect_attempts"] = self.options["reconnect_attempts"]
        return nc

    async def _on_error(self, exc: Exception) -> None:
        # nats-py reports here what its background tasks meet: a refused connect,
        # a slow consumer dropping messages (the run counts those as lost)
        if isinstance(exc, nats.errors.FlushTimeoutError):
            # a publish gave up waiting for the flusher (flush_timeout above): not the
            # reason of a later drop, and the message is still in the buffer
            LOG.debug("nats: a publish waited %ss for the flusher", FLUSH_WITHIN)
        elif isinstance(exc, nats.errors.SlowConsumerError):
            # one per message nats-py dropped: the step's errors say why they are lost
            self.report(
                DriverError(
                    f"slow consumer on {exc.subject}: nats-py dropped a message "
                    f"(more than pending_messages = {self.options['pending_messages']} waiting)"
                )
            )
        else:  # the reason a connect or the connection failed, for the next message
            self._last_error = exc

    async def _on_disconnected(self) -> None:
        # nats-py reconnects by itself, buffering publishes meanwhile: say it happened.
        # Not for our own close (self.nc is cleared first), nor before start() is done,
        # nor when nats-py gives up: its close() calls this again, for the same loss
        self._drops += 1
        nc = self.nc
        if nc is None or nc.is_closed:
            return
        why = repr(self._last_error) if self._last_error is not None else "no reason given"
        connection_lost(self, self._url, why, "NATS connection")
        self._last_error = None  # the next drop has its own reason

    def _explain(self, url: str, exc: BaseException, timeout: float) -> str:
        # nats-py says only "no servers"; why the server refused came to the error callback
        cause = self._last_error if isinstance(exc, nats.errors.NoServersError) else exc
        self._last_error = None
        return explain(url, cause or exc, timeout)

    def _client(self) -> Client:
        if self.nc is None or self.nc.is_closed:
            raise ConnectionLost("the NATS connection is closed")
        return self.nc

    async def aclose(self) -> None:
        self._closing = True
        if self._pulls:  # each finishes its pull request (PULL_WAIT), then unsubscribes
            _, late = await asyncio.wait(self._pulls, timeout=PULL_WAIT + 2.0)
            for task in late:
                task.cancel()
            self._pulls = []
        nc, self.nc, self.js = self.nc, None, None
        subs, self._subs = self._subs, []
        if nc is None:
            return
        try:
            async with asyncio.timeout(3.0):
                for sub in subs:
                    await sub.unsubscribe()
                await nc.close()
        except Exception as exc:  # noqa: BLE001 - aclose never raises
            LOG.debug("nats: close: %r", exc)

    # -- servers -----------------------------------------------------------------

    async def _subscribe(self, subject: str, queue: str, handler: Handler) -> None:
        nc = self._client()

        async def on_message(msg: Msg) -> None:
            reply = handler(msg.data)
            if msg.reply:  # a call, or a mandatory cast waiting for its receipt
                await nc.publish(msg.reply, reply or b"")

        with map_errors(RULES):
            sub = await nc.subscribe(
                subject,
                queue=queue,
                cb=on_message,
                pending_msgs_limit=self.options["pending_messages"],
                pending_bytes_limit=-1,  # the message count is the limit that matters
            )
            self._subs.append(sub)
            await nc.flush()  # consuming once the server has the subscription

    async def serve_rpc(self, target: Target, handler: Handler) -> None:
        shared = Target(target.exchange, target.topic)
        await self._subscribe(subjects.rpc(shared), subjects.rpc_group(shared), handler)
        if target.server:
            await self._subscribe(subjects.rpc(shared.to_server(target.server)), "", handler)
        fanout = Target(target.exchange, target.topic, fanout=True)
        await self._subscribe(subjects.rpc(fanout), "", handler)

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        if not target.durable:
            await self._subscribe(subjects.notification(target), subjects.token(pool), handler)
            return
        js = self._jetstream()
        durable = subjects.durable_name(target, pool)
        with map_errors(RULES):
            await self._ensure_stream(target)
            pull = await js.pull_subscribe(
                subjects.notification(target),
                durable=durable,
                pending_msgs_limit=self.options["pending_messages"],
                config=nats.js.api.ConsumerConfig(ack_wait=float(self.options["ack_wait"])),
            )
        self._pulls.append(
            asyncio.create_task(self._pull(pull, handler), name=f"mqlab-nats pull {durable}")
        )

    async def _pull(self, pull: JetStreamContext.PullSubscription, handler: Handler) -> None:
        """Pull, handle and ack durable notifications until the transport closes."""
        try:
            while not self._closing:
                try:
                    msgs = await pull.fetch(PULL_BATCH, timeout=PULL_WAIT)
                except nats.errors.TimeoutError:
                    continue  # nothing came: the request expired at the server too
                except Exception as exc:  # noqa: BLE001 - a drop: nats-py reconnects
                    if self._closing:
                        return
                    LOG.debug("nats: a pull failed: %r", exc)
                    await asyncio.sleep(PULL_WAIT)
                    continue
                for msg in msgs:
                    handler(msg.data)
                    try:  # after handling: a crash before this means redelivery
                        await msg.ack()
                    except Exception as exc:  # noqa: BLE001 - unacked: redelivered, counted twice
                        LOG.debug("nats: an ack failed: %r", exc)
        finally:
            with contextlib.suppress(Exception):
                await pull.unsubscribe()

    def _jetstream(self) -> JetStreamContext:
        self._client()
        assert self.js is not None
        return self.js

    async def _ensure_stream(self, target: Target) -> None:
        name = subjects.stream(target)
        if name not in self._streams:
            await self._jetstream().add_stream(name=name, subjects=subjects.stream_subjects(target))
            self._streams.add(name)

    # -- clients -----------------------------------------------------------------

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        nc = self._client()
        with map_errors(RULES):
            try:
                msg = await nc.request(subjects.rpc(target), body, timeout=timeout)
            except nats.errors.TimeoutError as exc:
                raise call_timeout(target, timeout) from exc
        return msg.data

    async def cast(self, target: Target, body: bytes) -> None:
        nc = self.nc
        if nc is None:  # aclose() ran; a connection nats-py closed raises its own error
            # (ConnectionClosedError, mapped below): no is_closed check per cast here
            raise ConnectionLost("the NATS connection is closed")
        subject = self._rpc_subject(target)
        # the library's errors mapped as map_errors maps them, its context entered only
        # when one is raised: on the hot path a try costs nothing, a context manager does
        try:
            if self._mandatory:
                await nc.request(subject, body, timeout=float(self.options["cast_timeout"]))
            elif self._flush:
                await self._publish_flushed(nc, subject, body)
            else:
                await nc.publish(subject, body)
        except Exception:
            with map_errors(RULES):
                raise

    async def notify(self, target: Target, body: bytes) -> None:
        nc = self._client()
        subject = subjects.notification(target)
        with map_errors(RULES):
            if target.durable:
                await self._ensure_stream(target)
                await self._jetstream().publish(subject, body)  # waits for the stream's ack
                return
            if self.options["flush"]:
                await self._publish_flushed(nc, subject, body)
            else:  # the hot path: no extra call
                await nc.publish(subject, body)

    async def _publish_flushed(self, nc: Client, subject: str, body: bytes) -> None:
        """A core NATS publish that returns once the server has it (``flush = true``).

        While nats-py reconnects, its flush returns at once without asking the server
        (its reader and writer tasks are gone) and a publish only waits in its buffer:
        the send then fails with ConnectionLost instead of passing for sent.
        """
        if not nc.is_connected:  # not even buffered: a send that failed cannot arrive later
            raise ConnectionLost(
                "NATS connection lost, nats-py is reconnecting: not sent (flush = true)"
            )
        await nc.publish(subject, body)  # may wait for the flusher: the connection can drop
        if not nc.is_connected:
            raise ConnectionLost(
                "NATS connection lost, nats-py is reconnecting: the message waits in its "
                "buffer, the server does not have it (flush = true)"
            )
        drops = self._drops
        try:
            await nc.flush()
        except nats.errors.FlushTimeoutError as exc:
            # the PING went out on a connection that dropped: its PONG never comes
            if self._drops != drops or not nc.is_connected:
                raise ConnectionLost(
                    "NATS connection lost before the server's PONG: "
                    "the server may not have the message (flush = true)"
                ) from exc
            raise
