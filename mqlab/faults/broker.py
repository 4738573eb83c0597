"""The broker effector: node actions on a managed broker's nodes, off the event loop.

The nodes are a managed RabbitMQ cluster's (:class:`mqlab.rabbitmq.faults.NodeControl`)
or a replicated Kafka's or Artemis' (:class:`mqlab.servers.nodes.ProcessNodes`): the step's
driver's own broker, through its broker side's ``node_control``. ``node = "queues"``
(RabbitMQ only) is resolved when the event fires: the node that holds the step's first
queue then (its leader, or master), as the management API says.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from mqlab.config.events import FaultEvent, NodeActions, node_index
from mqlab.errors import BrokerError
from mqlab.faults.timeline import Fired


class BrokerFaults:
    """Fires broker events on one managed cluster; puts it back as it was after the step."""

    def __init__(self, control: NodeActions, queue_node: Callable[[], Awaitable[str]]) -> None:
        self.control = control
        self.queue_node = queue_node  # "nodeK" holding the step's queues
        self._alarms: set[int] = set()

    async def _place(self, ev: FaultEvent) -> int:
        name = await self.queue_node() if ev.node == "queues" else ev.node
        k = node_index(name)
        if not k:
            raise BrokerError(f"cannot tell which node holds the step's queues ({name or 'none'})")
        return k

    async def fire(self, ev: FaultEvent) -> str | Fired:
        k = await self._place(ev)
        c = self.control
        if ev.action == "memory_alarm":
            (self._alarms.add if ev.on else self._alarms.discard)(k)
            detail = await asyncio.to_thread(c.memory_alarm, k, ev.on)
        else:
            act = {
                "stop_node": c.stop,
                "kill_node": c.kill,
                "start_node": c.start,
                "restart_node": c.restart,
                "close_connections": c.close_connections,
            }[ev.action]
            detail = f"node{k}: " + await asyncio.to_thread(act, k)
        # a node on a broker host: when the action began there, on this controller's clock
        return Fired(detail, *c.last_at) if c.last_at is not None else detail

    async def restore(self) -> str:
        """Start the nodes the step left down and clear its alarms: the next step starts whole."""
        done = []
        for k in await asyncio.to_thread(self.control.stopped):
            done.append(f"node{k}: " + await asyncio.to_thread(self.control.start, k))
        for k in sorted(self._alarms):
            done.append(await asyncio.to_thread(self.control.memory_alarm, k, False))
        self._alarms.clear()
        return "; ".join(done)
