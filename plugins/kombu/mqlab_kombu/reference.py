"""aio-pika's own ceiling for cast (the library this plugin drives, as kombu's API).

The thinnest use of aio-pika: ``default_exchange.publish`` awaited in a tight
loop on a channel without publisher confirms, and one ``queue.consume`` that
acks each delivery (the plugin always acks casts, before or after its handler)
under the plugin's prefetch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import aio_pika
import aio_pika.abc

from mqlab.sdk.reference import AsyncReferenceLoop, Tally, until_stopped


class KombuReference(AsyncReferenceLoop):
    library: ClassVar[str] = "aio-pika"

    @classmethod
    def auto_ack(cls, options: Mapping[str, Any]) -> bool:
        return False  # the plugin acks every delivery (`ack` = before / after)

    @classmethod
    def confirms(cls, options: Mapping[str, Any]) -> str | None:
        return "confirm = true" if options["confirm"] else None

    async def aconsume(self, tally: Tally, ready: Callable[[str], None]) -> None:
        conn = await aio_pika.connect(self.spec.urls[0])
        try:
            channel = await conn.channel(publisher_confirms=False)
            prefetch = int(self.spec.options["prefetch"])
            if prefetch:
                await channel.set_qos(prefetch_count=prefetch)
            queue = await channel.declare_queue(self.spec.name, auto_delete=True)

            async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                tally.n += 1
                await message.ack()

            await queue.consume(on_message)
            ready("")
            await until_stopped(tally)
        finally:
            await conn.close()

    async def apublish(self, tally: Tally) -> None:
        conn = await aio_pika.connect(self.spec.urls[0])
        try:
            channel = await conn.channel(publisher_confirms=False)
            publish = channel.default_exchange.publish
            message, name = aio_pika.Message(self.spec.body), self.spec.name
            while not tally.stop:
                # not mandatory (aio-pika's default): once the consumer has gone first, with
                # its queue, every publish would come back (basic.return), each one logged
                await publish(message, name, mandatory=False)
                tally.n += 1
        finally:
            await conn.close()
