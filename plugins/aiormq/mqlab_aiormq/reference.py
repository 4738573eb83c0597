"""aiormq's own ceiling for cast: a bare publish loop and consumer on uvloop.

The thinnest use of aiormq: ``basic_publish`` to the default exchange awaited in
a tight loop on a channel without publisher confirms, and one ``basic_consume``
with ``no_ack`` as the plugin's option says (else one ``basic_ack`` per delivery
under the plugin's prefetch).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import aiormq
import aiormq.abc

from mqlab.sdk.reference import AsyncReferenceLoop, Tally, until_stopped


class AiormqReference(AsyncReferenceLoop):
    library: ClassVar[str] = "aiormq"

    @classmethod
    def auto_ack(cls, options: Mapping[str, Any]) -> bool:
        return bool(options["no_ack"])

    @classmethod
    def confirms(cls, options: Mapping[str, Any]) -> str | None:
        return "confirm = true" if options["confirm"] else None

    async def aconsume(self, tally: Tally, ready: Callable[[str], None]) -> None:
        conn = await aiormq.connect(self.spec.urls[0])
        try:
            channel = await conn.channel(publisher_confirms=False)
            await channel.queue_declare(self.spec.name, auto_delete=True)
            auto_ack = self.auto_ack(self.spec.options)
            if not auto_ack:
                await channel.basic_qos(prefetch_count=int(self.spec.options["prefetch"]))

            async def on_message(message: aiormq.abc.DeliveredMessage) -> None:
                tally.n += 1
                if not auto_ack:
                    await channel.basic_ack(message.delivery_tag or 0)

            await channel.basic_consume(self.spec.name, on_message, no_ack=auto_ack)
            ready("")
            await until_stopped(tally)
        finally:
            await conn.close()

    async def apublish(self, tally: Tally) -> None:
        conn = await aiormq.connect(self.spec.urls[0])
        try:
            channel = await conn.channel(publisher_confirms=False)
            body, name = self.spec.body, self.spec.name
            while not tally.stop:
                await channel.basic_publish(body, routing_key=name)
                tally.n += 1
        finally:
            await conn.close()
