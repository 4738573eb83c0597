"""aiomqtt's own ceiling for cast: bare publishers and a shared subscriber on mosquitto.

The plugin's cast, with none of mqlab: ``publish`` at the driver's QoS from
``inflight`` tasks at once, each awaiting its publish as a caster of the plugin
does (at QoS 1 aiomqtt returns on the PUBACK, and paho keeps at most
``inflight`` unacknowledged: the plugin's window), and one shared subscription
at the same QoS, read through ``client.messages`` as the plugin's dispatcher
reads it (paho acknowledges each QoS 1 delivery as it arrives). MQTT 5, a clean
session and TCP_NODELAY, as the plugin connects.

The publishers outrun the subscriber, as a plugin's fast casters do, and aiomqtt
delivers less flooded than paced: its reader decodes one packet per event-loop
turn into a queue that only grows, while ``messages`` takes about three turns per
message. The rate is the flooded one (docs/drivers.md, mqtt).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import aiomqtt

from mqlab.sdk.reference import AsyncReferenceLoop, Tally, run_until_stopped
from mqlab_mqtt.transport import inflight_limit, new_client


class MqttReference(AsyncReferenceLoop):
    library: ClassVar[str] = "aiomqtt"

    @classmethod
    def _qos(cls, options: Mapping[str, Any]) -> int:
        return int(options["qos"])

    @classmethod
    def _window(cls, options: Mapping[str, Any]) -> int:
        return int(options["inflight"])

    @classmethod
    def auto_ack(cls, options: Mapping[str, Any]) -> bool:
        return cls._qos(options) == 0  # at QoS 1 and 2 each message is acknowledged

    @classmethod
    def describe(cls, options: Mapping[str, Any]) -> str:
        qos = cls._qos(options)
        if qos == 0:
            return "QoS 0, no acks"
        # no more in flight than the step's senders either (ReferenceLoop.in_flight)
        if qos == 2:  # the label is made before the loop connects: the cap is not known yet
            return (
                f"QoS 2, up to {cls._window(options)} in flight or the step's senders, "
                "capped at the server's Receive Maximum"
            )
        return f"QoS {qos}, {cls._window(options)} in flight or the step's senders if fewer"

    def _client(self, role: str) -> aiomqtt.Client:
        # as the plugin connects: MQTT 5, TCP_NODELAY, its window; a clean session, so the
        # subscription and anything queued for it end at disconnect
        window = self._window(self.spec.options)
        return new_client(self.spec.urls[0], f"{self.spec.name}-{role}", window)

    @property
    def _topic(self) -> str:
        return f"mqlab/ref/{self.spec.name}"

    async def aconsume(self, tally: Tally, ready: Callable[[str], None]) -> None:
        qos = self._qos(self.spec.options)
        async with self._client("consume") as client:

            async def count() -> None:
                async for _message in client.messages:
                    tally.n += 1
                    if tally.stop:
                        return

            # shared, as the servers of the plugin's topic share its casts
            await client.subscribe(f"$share/{self.spec.name}/{self._topic}", qos=qos)
            ready("")
            await run_until_stopped(tally, count())
            # no UNSUBSCRIBE: its UNSUBACK would wait behind all that mosquitto still has
            # queued for a consumer the publisher outran; leaving the clean session drops it

    async def apublish(self, tally: Tally) -> None:
        qos = self._qos(self.spec.options)
        client = self._client("publish")
        limit = inflight_limit(client, self._window(self.spec.options), qos)  # as the plugin's
        async with client:
            publish, topic, body = client.publish, self._topic, self.spec.body

            async def cast() -> None:
                while not tally.stop:
                    await publish(topic, body, qos=qos)
                    tally.n += 1

            # each of the plugin's casts is awaited by one of the step's senders: no more
            # publishes in flight than those
            casters = [cast() for _ in range(self.in_flight(limit()))]
            await run_until_stopped(tally, *casters)
