"""nats-py's own ceiling for cast: a bare core-NATS publish loop and a queue-group subscriber.

The plugin's cast, with none of mqlab: ``publish`` to one subject awaited in a
tight loop, without a flush (the plugin's default): nats-py's background flusher
writes its pending buffer, and a publish waits for it only once the buffer
passes the plugin's ``pending_size`` of 8 MiB, so what the publisher buffers
stays bounded. One subscriber in a queue group, as the plugin's servers share a
topic, counts in its callback, with the plugin's ``pending_messages`` limit and
no byte limit. Core NATS has no acks: a subscriber that falls that far behind is
a slow consumer, and nats-py drops what does not fit, as it would under the
plugin; the loop then fails with the count rather than report a rate as if
nothing had been lost.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from mqlab.sdk.reference import AsyncReferenceLoop, Tally, run_until_stopped, until_stopped
from mqlab_nats.transport import PENDING_SIZE


class _Errors:
    """What nats-py's background tasks met: drops counted, the last other error kept."""

    def __init__(self) -> None:
        self.dropped = 0
        self.last: Exception | None = None

    async def record(self, exc: Exception) -> None:
        # without a callback nats-py logs each one to stderr: a line per dropped message
        if isinstance(exc, nats.errors.SlowConsumerError):
            self.dropped += 1
        else:
            self.last = exc


def _closed(nc: Client, errors: _Errors) -> None:
    """Raise if the connection dropped before the window's end (it does not reconnect)."""
    if nc.is_closed:
        why = f": {errors.last!r}" if errors.last is not None else ""
        raise ConnectionError(f"nats: the connection closed during the loop{why}")


class NatsReference(AsyncReferenceLoop):
    library: ClassVar[str] = "nats-py"

    @classmethod
    def auto_ack(cls, options: Mapping[str, Any]) -> bool:
        return True  # core NATS never acknowledges a message

    @classmethod
    def confirms(cls, options: Mapping[str, Any]) -> str | None:
        # what makes each of the plugin's casts wait for an answer (the loop's never do)
        if options["mandatory"]:
            return "mandatory = true"  # a request, answered by the consumer
        return "flush = true" if options["flush"] else None  # a PING/PONG

    @classmethod
    def describe(cls, options: Mapping[str, Any]) -> str:
        return "core NATS, queue group, no acks"

    async def _connect(self, errors: _Errors) -> Client:
        return await nats.connect(
            servers=[self.spec.urls[0]],
            name=self.spec.name,  # what the server lists (connz) while the loop runs
            allow_reconnect=False,  # a lost connection ends the loop: it is not measured
            error_cb=errors.record,
            pending_size=PENDING_SIZE,
        )

    async def aconsume(self, tally: Tally, ready: Callable[[str], None]) -> None:
        errors = _Errors()
        limit = int(self.spec.options["pending_messages"])
        nc = await self._connect(errors)
        try:

            async def on_message(_msg: Msg) -> None:
                tally.n += 1

            name = self.spec.name
            sub = await nc.subscribe(
                name,
                queue=name,
                cb=on_message,
                pending_msgs_limit=limit,
                pending_bytes_limit=-1,  # as the plugin: the message count is the limit
            )
            await nc.flush()  # consuming once the server has the subscription
            ready("")
            await until_stopped(tally)
            _closed(nc, errors)
            await sub.unsubscribe()
        finally:
            await nc.close()
        if errors.dropped:
            raise RuntimeError(
                f"slow consumer: nats-py dropped {errors.dropped} messages "
                f"(more than pending_messages = {limit} waiting)"
            )

    async def apublish(self, tally: Tally) -> None:
        errors = _Errors()
        nc = await self._connect(errors)
        try:
            publish, name, body = nc.publish, self.spec.name, self.spec.body

            async def flood() -> None:
                while not tally.stop:
                    await publish(name, body)
                    tally.n += 1

            # a publish waiting for a flush hangs once the connection is gone (nats-py
            # leaves its future unresolved): at the end it is cancelled all the same
            await run_until_stopped(tally, flood())
            _closed(nc, errors)
        finally:
            await nc.close()
