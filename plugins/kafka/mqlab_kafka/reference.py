"""aiokafka's own ceiling for cast: a producer sending without waiting, one group member reading.

The thinnest use of aiokafka for what the plugin's cast does, with the plugin's
options: the producer is configured as the plugin's (``acks``, ``linger_ms``,
``batch_size``, ``compression``) and sends records to one topic of
``partitions`` partitions, keeping up to ``WINDOW`` sends unacknowledged (the
plugin's senders each wait for their record's acknowledgement, many at once);
the consumer is one member of a consumer group fetching up to ``batch``
records at a time and committing each batch after it (``commit = "after"``)
or before counting it (``"before"``), as the plugin's servers do.

The consumer creates the topic and deletes it, with its group, when it stops;
the publisher creates nothing (it waits for the topic to exist).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaTimeoutError
from aiokafka.protocol.admin import DeleteGroupsRequest

from mqlab.sdk.reference import STOP_GRACE, AsyncReferenceLoop, Tally, run_until_stopped
from mqlab_kafka import topics
from mqlab_kafka.group import consumer
from mqlab_kafka.transport import MAX_REQUEST, bootstrap

#: sends the publisher keeps unacknowledged at most (its backpressure)
WINDOW = 1000
#: milliseconds a fetch of an empty topic waits before it looks at ``tally.stop``
TICK_MS = 100


class KafkaReference(AsyncReferenceLoop):
    library: ClassVar[str] = "aiokafka"

    @classmethod
    def auto_ack(cls, options: Mapping[str, Any]) -> bool:
        return bool(options["commit"] == "before")

    @classmethod
    def describe(cls, options: Mapping[str, Any]) -> str:
        when = "before" if cls.auto_ack(options) else "after"
        return f"acks={options['acks']}, commit {when} each fetch of up to {options['batch']}"

    async def aconsume(self, tally: Tally, ready: Callable[[str], None]) -> None:
        where = [bootstrap(self.spec.urls[0])]
        options = self.spec.options
        topic, group = self.spec.name, topics.servers_group(self.spec.name)
        admin = AIOKafkaAdminClient(bootstrap_servers=where)
        await admin.start()
        reader = consumer(where, "mqlab-ref", group, int(options["batch"]))
        try:
            await admin.create_topics([NewTopic(topic, int(options["partitions"]), 1)])
            reader.subscribe([topic])
            await reader.start()
            while not reader.assignment():
                await reader.getmany(timeout_ms=TICK_MS)
            ready("")
            after = options["commit"] == "after"
            while not tally.stop:
                batches = await reader.getmany(
                    timeout_ms=TICK_MS, max_records=int(options["batch"])
                )
                if not batches:
                    continue
                if not after:
                    await reader.commit()
                for records in batches.values():
                    tally.n += len(records)
                if after:
                    await reader.commit()
        finally:
            with contextlib.suppress(Exception):
                await reader.stop()
            with contextlib.suppress(Exception):
                node = await admin.find_coordinator(group)
                await admin._send_request(DeleteGroupsRequest([group]), node)
            with contextlib.suppress(Exception):
                await admin.delete_topics([topic])
            await admin.close()

    async def apublish(self, tally: Tally) -> None:
        options = self.spec.options
        compression = options["compression"]
        producer = AIOKafkaProducer(
            bootstrap_servers=[bootstrap(self.spec.urls[0])],
            acks=options["acks"],
            linger_ms=options["linger_ms"],
            max_batch_size=options["batch_size"],
            compression_type=None if compression == "none" else compression,
            max_request_size=MAX_REQUEST,
        )
        await producer.start()
        send, topic, body = producer.send, self.spec.name, self.spec.body
        window: list[asyncio.Future[Any]] = []

        async def flood() -> None:
            while not tally.stop:
                window.append(await send(topic, body))
                tally.n += 1
                if len(window) >= WINDOW:
                    await asyncio.gather(*window)
                    window.clear()

        try:
            # a consumer that stopped first deleted the topic: the producer then waits for
            # its metadata and retries its batches until request_timeout_ms (40 s), which
            # the end of the loop does not wait for
            await run_until_stopped(tally, flood())
        finally:
            await _stop(producer)
            # after a consumer that stopped first, its deleted topic was made again by the
            # broker for these sends (auto-creation): whoever ends last removes it
            admin = AIOKafkaAdminClient(bootstrap_servers=[bootstrap(self.spec.urls[0])])
            with contextlib.suppress(Exception):
                await admin.start()
                await admin.delete_topics([topic])
            await admin.close()


async def _stop(producer: AIOKafkaProducer) -> None:
    """Stop ``producer`` within STOP_GRACE seconds, and for good.

    ``stop()`` waits for every batch to be delivered. Batches for a topic the consumer
    deleted wait up to ``request_timeout_ms`` while the producer's sender keeps asking for
    the topic's metadata, and the broker makes the topic again for each ask (auto-creation):
    cancelling ``stop()`` would leave that sender running, and it would bring back the topic
    after this loop deleted it. So what is still undelivered then fails, and the sender and
    the connections end here."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(producer.stop(), STOP_GRACE)
        return
    producer._message_accumulator.fail_all(KafkaTimeoutError())
    sender = producer._sender.sender_task
    if sender is not None:
        sender.cancel()
        await asyncio.wait([sender])
    with contextlib.suppress(Exception):
        await producer.client.close()
