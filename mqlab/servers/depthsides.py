"""The broker sides of the servers whose queue depth mqlab reads beside RabbitMQ: Redis
(streams and lists), Kafka, Artemis and NATS (JetStream's durable consumers; core NATS
keeps nothing, so a step without them holds none).

Each is a :class:`~mqlab.servers.brokerside.ServerSide` (CPU read by its processes) whose
``depth`` asks its server afresh each time, through a reader of
:mod:`mqlab.servers.depth` opened for that one question and closed after it: the drain
asks a few times per step, and nothing stays open between steps. The figures are each
queue's own (Redis: a group's lag and pending entries, a list's length; Kafka: a group's
uncommitted offsets; Artemis: a queue's message count; NATS: a durable consumer's pending
and unacknowledged), read at that moment (``age_ns`` 0). The accountant maps each queue to
its delivery groups through the step's layout (:func:`mqlab.faults.history.depth_groups`).
"""

from __future__ import annotations

from mqlab.measure.account import Depth
from mqlab.servers.brokerside import ServerSide
from mqlab.servers.depth import ArtemisDepth, KafkaDepth, NatsDepth, RedisDepth

__all__ = ["KINDS", "DepthSide"]

#: the server kinds whose depth is read here
KINDS = frozenset({"redis", "kafka", "artemis", "nats"})


class DepthSide(ServerSide):
    """A Redis, Kafka, Artemis or NATS server as a step's broker, its depth read fresh."""

    reads_depth = True

    async def depth(self, marker: str) -> tuple[Depth, ...]:
        reader: RedisDepth | KafkaDepth | ArtemisDepth | NatsDepth
        try:
            if self.kind == "redis":
                reader = RedisDepth(self.urls[0])
            elif self.kind == "kafka":
                reader = KafkaDepth(self.urls)
            elif self.kind == "artemis":
                reader = ArtemisDepth(self.urls[0])
            else:
                reader = NatsDepth(self.urls[0])
        except ImportError as exc:  # the library comes with the plugin that needs the broker
            return (Depth(self.kind, None, why=f"{self.kind}'s depth needs {exc.name}"),)
        try:
            return await reader.depth(marker)
        finally:
            if isinstance(reader, RedisDepth | KafkaDepth):
                await reader.aclose()
