"""One member of one consumer group: fetch a batch, handle it, reply, commit.

With ``commit = "after"`` (at-least-once) a batch's offsets are committed once
every record of it was handled and every reply it produced was acknowledged:
a server that dies holding a batch leaves it to the next member of its group
(or to itself, restarted under the same group). With ``"before"``
(at-most-once) they are committed as soon as the batch is fetched: a server
that dies holding it loses it.

A new group starts at the topic's beginning (``auto_offset_reset =
"earliest"``): what clients sent before the first server of a topic joined is
kept for it, as a queue keeps it. :meth:`GroupReader.start` returns once the
group gave this member its partitions (possibly none, when a group has more
members than its topic has partitions), so a client that sends afterwards
reaches a server that reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from mqlab.errors import ConnectionLost, TransportError
from mqlab.transport import Handler
from mqlab_kafka import topics

LOG = logging.getLogger(__name__)

#: milliseconds a fetch of an empty topic waits before it looks at the loop again
POLL_MS = 1000
#: seconds a member may take to join its group and get its partitions
JOIN_WITHIN = 30.0
#: a member's heartbeat: how soon it learns of a rebalance (a member joining or leaving)
HEARTBEAT_MS = 300
#: the broker drops a member it has not heard from in this long (its minimum is 6 s)
SESSION_MS = 6000
#: bytes one partition's fetch may return: room for the kit's 1 MiB bodies
FETCH_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Reading:
    """How a group's members read and commit (from the driver's options)."""

    commit_after: bool
    batch: int


def consumer(bootstrap: list[str], client_id: str, group_id: str | None, batch: int) -> Any:
    """An aiokafka consumer as every reader of the plugin configures one (not started)."""
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        client_id=client_id,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=batch,
        heartbeat_interval_ms=HEARTBEAT_MS,
        session_timeout_ms=SESSION_MS,
        max_partition_fetch_bytes=FETCH_BYTES,
    )


class _Assigned(ConsumerRebalanceListener):  # type: ignore[misc]
    """Tells when the group first gave this member its partitions."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    async def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.event.set()


class GroupReader:
    """Reads ``topic`` as a member of ``group`` and hands each value to ``handler``."""

    def __init__(
        self,
        bootstrap: list[str],
        client_id: str,
        topic: str,
        group: str,
        handler: Handler,
        reading: Reading,
        producer: AIOKafkaProducer,
        report: Callable[[TransportError], None],
    ) -> None:
        self.topic = topic
        self.group = group
        self.handler = handler
        self.reading = reading
        self.producer = producer
        self.report = report
        self.consumer = consumer(bootstrap, client_id, group, reading.batch)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Join the group; return once it assigned this member its partitions."""
        assigned = _Assigned()
        self.consumer.subscribe([self.topic], listener=assigned)
        await self.consumer.start()
        self._task = asyncio.create_task(self._run(), name=f"mqlab-kafka {self.group}")
        try:
            await asyncio.wait_for(assigned.event.wait(), JOIN_WITHIN)
        except TimeoutError:
            raise ConnectionLost(
                f"the consumer group {self.group!r} assigned no partitions within {JOIN_WITHIN:g}s"
            ) from None

    async def _run(self) -> None:
        try:
            while True:
                batches = await self.consumer.getmany(
                    timeout_ms=POLL_MS, max_records=self.reading.batch
                )
                if batches:
                    await self._handle(batches)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a dead reader shows as lost messages
            LOG.error("kafka: reader of %s (group %s) stopped: %r", self.topic, self.group, exc)

    async def _handle(self, batches: dict[Any, list[Any]]) -> None:
        if not self.reading.commit_after and not await self._committed(batches, "before"):
            # at most once: handled now, the batch could come again after a rebalance; left,
            # it is lost (told) or, after a rebalance, fetched again and committed
            return
        delivered = []
        for records in batches.values():
            for record in records:
                reply = self.handler(record.value)
                if not record.headers:  # a cast or a notification: nothing to answer
                    continue
                headers = dict(record.headers)
                reply_to = headers.get(topics.REPLY_TO)
                if reply_to is not None:
                    delivered.append(
                        await self.producer.send(
                            reply_to.decode(),
                            reply or b"",
                            headers=[(topics.CORRELATION, headers[topics.CORRELATION])],
                        )
                    )
        if delivered:
            await asyncio.gather(*delivered)
        if self.reading.commit_after:
            await self._committed(batches, "after")  # not taken: the batch may come again

    async def _committed(self, batches: dict[Any, list[Any]], when: str) -> bool:
        """Commit what was fetched; False (told) when the broker did not take it. A commit
        fails while the broker restarts or the group rebalances: the reader goes on (it
        stopped for good before, and the group read nothing more)."""
        try:
            await self.consumer.commit()
        except KafkaError as exc:
            n = sum(len(records) for records in batches.values())
            fate = "not handled" if when == "before" else "handled, and may come again"
            self.report(ConnectionLost(
                f"kafka: the commit {when} handling {n} record(s) of {self.topic} failed "
                f"({type(exc).__name__}: {exc}): {fate}"
            ))  # fmt: skip
            return False
        return True

    async def stop(self, admin: AIOKafkaAdminClient) -> bool:
        """Stop reading and leave the group (its members share the partitions again).

        True when the group has committed everything its topic holds: nothing is left
        for a restarted member, and the group may go once empty.
        """
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        done = False
        try:
            done = await self._all_committed(admin)
        except (KafkaError, OSError) as exc:
            LOG.debug("kafka: the lag of %s: %r", self.group, exc)
        try:
            await self.consumer.stop()
        except KafkaError as exc:
            LOG.debug("kafka: leaving %s: %r", self.group, exc)
        return done

    async def _all_committed(self, admin: AIOKafkaAdminClient) -> bool:
        """Whether the group committed every partition of its topic up to its end."""
        parts = self.consumer.partitions_for_topic(self.topic) or set()
        tps = [TopicPartition(self.topic, p) for p in parts]
        if not tps:
            return True
        ends, starts, committed = await asyncio.gather(
            self.consumer.end_offsets(tps),
            self.consumer.beginning_offsets(tps),
            admin.list_consumer_group_offsets(self.group, partitions=tps),
        )
        for tp in tps:
            mark = committed.get(tp)
            at = starts[tp] if mark is None or mark.offset < 0 else mark.offset
            if at < ends[tp]:
                return False
        return True
