"""A pre-filled step as the runner performs it (seed 002's order): the step's queues
declared on the broker before any worker starts, the batch published into them while the
servers hold, then every server told to consume at once; the drain is timed from then.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from mqlab.config.plan import Layout, Step
from mqlab.errors import BrokerError
from mqlab.servers.brokerside import BrokerSide, total
from mqlab.worker import protocol

if TYPE_CHECKING:
    from mqlab.worker.pool import Worker


class Prefill:
    """One pre-filled step: its queues, and the moment its consumers were let go."""

    def __init__(self, step: Step, lay: Layout, side: BrokerSide) -> None:
        self.step = step
        self.lay = lay
        self.side = side  # the step's broker: its management API declares, its depth counts
        self.servers: list[Worker] = []
        self.clients: list[Worker] = []
        #: when the servers were told to consume (the controller's monotonic ns); 0: not yet
        self.at = 0
        #: the step's messages the broker held just before (None: it could not say)
        self.queued: int | None = None

    async def declare(self) -> None:
        """The step's shared queues and their bindings, declared as its servers will."""
        api = self.side.management
        if api is None:
            raise BrokerError(
                "a pre-filled step declares its queues through RabbitMQ's management API, "
                "and this run has none"
            )
        sc = self.step.scenario
        await api.declare(self.lay.topics, sc.exchange, sc.durable, self.step.queue_type)

    async def tick(self) -> None:
        """Let the servers consume once every client has sent its batch."""
        if not self.at and self.clients and all(w.done or w.gone for w in self.clients):
            await self.release()

    async def release(self) -> None:
        """Let the servers consume now (once), first asking the broker what it holds."""
        if self.at:
            return
        if self.side.reads_depth:
            self.queued = total(await self.side.depth(self.lay.marker))[0]
        self.at = time.monotonic_ns()
        for w in self.servers:
            await w.send(protocol.Consume())
