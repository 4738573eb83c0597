"""pika's own ceiling for cast: a BlockingConnection publish loop and consumer.

The thinnest use of pika: ``basic_publish`` to the default exchange in a tight
loop, no confirms, and a ``basic_consume`` on one queue, with auto-ack when the
plugin consumes casts without acks (``retry = 0``), else one ``basic_ack`` per
delivery under the plugin's prefetch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import pika

from mqlab.reference import ReferenceLoop, Tally


class PikaReference(ReferenceLoop):
    library: ClassVar[str] = "pika"

    @classmethod
    def auto_ack(cls, options: Mapping[str, Any]) -> bool:
        return options.get("retry") == 0  # the plugin's no_ack mode (options.py)

    def _connect(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.URLParameters(self.spec.urls[0]))

    def consume(self, tally: Tally, ready: Callable[[str], None]) -> None:
        conn = self._connect()
        try:
            channel = conn.channel()
            channel.queue_declare(self.spec.name, auto_delete=True)
            auto_ack = self.auto_ack(self.spec.options)
            if not auto_ack:
                channel.basic_qos(prefetch_count=int(self.spec.options.get("prefetch") or 0))

            def on_message(ch: Any, method: Any, _props: Any, _body: bytes) -> None:
                tally.n += 1
                if not auto_ack:
                    ch.basic_ack(method.delivery_tag)

            channel.basic_consume(self.spec.name, on_message, auto_ack=auto_ack)
            ready("")
            while not tally.stop:
                conn.process_data_events(time_limit=0.1)
        finally:
            conn.close()

    def publish(self, tally: Tally) -> None:
        conn = self._connect()
        try:
            publish = conn.channel().basic_publish
            body, name = self.spec.body, self.spec.name
            while not tally.stop:
                publish("", name, body)
                tally.n += 1
        finally:
            conn.close()
