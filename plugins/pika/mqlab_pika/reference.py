"""pika's own ceiling for cast: a publish loop and a consumer on pika's callbacks.

The thinnest use of pika as the plugin uses it (its ``AsyncioConnection`` on uvloop,
as mqlab's workers run) without any of mqlab: ``basic_publish`` to the default
exchange in bursts that keep pika's write buffer full but bounded (at the plugin's
own limit), no confirms, and a ``basic_consume`` on one queue whose callback counts,
with auto-ack when the plugin consumes casts without acks (``retry = 0``), else one
``basic_ack`` per delivery under the plugin's prefetch. (A BlockingConnection loop
flushes the socket after every publish: it reached about a third of the plugin's
rate, so it was no ceiling; pika's own SelectConnection ioloop did as well as this.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import pika
import uvloop
from pika.adapters.asyncio_connection import AsyncioConnection
from pika.channel import Channel

from mqlab.sdk.reference import ReferenceLoop, Tally
from mqlab_pika.options import make_settings
from mqlab_pika.publisher import DRAIN_POLL, WRITE_HIGH
from mqlab_pika.urls import describe_connect_error

#: how often the loop looks at ``tally.stop``
_TICK = 0.1


class PikaReference(ReferenceLoop):
    library: ClassVar[str] = "pika"

    @classmethod
    def auto_ack(cls, options: Mapping[str, Any]) -> bool:
        return bool(options["retry"] == 0)  # the plugin's no_ack mode (options.py)

    @classmethod
    def confirms(cls, options: Mapping[str, Any]) -> str | None:
        settings = make_settings(options)  # what a cast waits for, as the plugin decides it
        if settings.mandatory:  # a return is matched to its publish by confirms
            return "mandatory = true"
        return "retry != 0" if settings.resends else None

    def _run(self, tally: Tally, on_channel: Callable[[AsyncioConnection, Channel], None]) -> None:
        """Connect, hand the open channel to ``on_channel`` and run the event loop until
        ``tally.stop``; raise what went wrong if the connection failed or closed before."""
        failed: list[BaseException] = []

        def closed(conn: AsyncioConnection, reason: BaseException) -> None:
            if not tally.stop:
                failed.append(reason)
            loop.stop()

        def open_failed(conn: AsyncioConnection, reason: BaseException | str) -> None:
            exc = reason if isinstance(reason, BaseException) else ConnectionError(reason)
            failed.append(ConnectionError(describe_connect_error(exc, url)))
            loop.stop()

        url = self.spec.urls[0]
        loop = uvloop.new_event_loop()
        conn = AsyncioConnection(
            pika.URLParameters(url),
            custom_ioloop=loop,
            on_open_callback=lambda c: c.channel(on_open_callback=lambda ch: on_channel(c, ch)),
            on_open_error_callback=open_failed,
            on_close_callback=closed,
        )

        def watch() -> None:
            if not tally.stop:
                loop.call_later(_TICK, watch)
            elif conn.is_open:
                conn.close()  # closed() stops the loop
            else:
                loop.stop()

        loop.call_later(_TICK, watch)
        try:
            loop.run_forever()
        finally:
            loop.close()
        if failed:
            raise ConnectionError(f"pika: {failed[0]!s}" if str(failed[0]) else repr(failed[0]))

    def consume(self, tally: Tally, ready: Callable[[str], None]) -> None:
        auto_ack = self.auto_ack(self.spec.options)
        prefetch = int(self.spec.options["prefetch"])
        name = self.spec.name

        def on_message(ch: Channel, method: Any, _props: Any, _body: bytes) -> None:
            tally.n += 1
            if not auto_ack:
                ch.basic_ack(method.delivery_tag)

        def on_channel(_conn: AsyncioConnection, ch: Channel) -> None:
            def consume(_frame: Any = None) -> None:
                ch.basic_consume(name, on_message, auto_ack=auto_ack, callback=lambda _f: ready(""))

            def declared(_frame: Any) -> None:
                if auto_ack:
                    consume()
                else:
                    ch.basic_qos(prefetch_count=prefetch, callback=consume)

            ch.queue_declare(name, auto_delete=True, callback=declared)

        self._run(tally, on_channel)

    def publish(self, tally: Tally) -> None:
        body, name = self.spec.body, self.spec.name

        def on_channel(conn: AsyncioConnection, ch: Channel) -> None:
            publish, buffered = ch.basic_publish, conn._transport.get_write_buffer_size
            later = conn.ioloop.call_later  # the uvloop loop itself

            def burst() -> None:
                if tally.stop:
                    return
                if buffered() >= WRITE_HIGH:  # the socket took nothing yet: let it drain
                    later(DRAIN_POLL, burst)
                    return
                # fill pika's buffer up to the plugin's limit, then let the loop write it
                while buffered() < WRITE_HIGH:
                    publish("", name, body)
                    tally.n += 1
                later(0, burst)

            burst()

        self._run(tally, on_channel)
