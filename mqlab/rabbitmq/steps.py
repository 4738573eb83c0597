"""What the core asks a RabbitMQ broker around each step, through its management API.

Before the step: a ``mirrored`` step gets an ha policy for the step's queue
names (they all carry the step's marker), so queues are mirrored from their
declaration on. At the end of the window, while the servers still hold their
queues: where each queue lives (leader or master, replicas) and which node each
client connection is on. After the step: the policy goes, and so do quorum
queues (durable by force, so nothing else would remove them).

Per-node CPU and memory come from the node processes when they run here (a
managed cluster, by PID) and from ``/api/nodes`` otherwise.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from mqlab.rabbitmq.mgmt import Declaring, Management, ManagementError
from mqlab.rabbitmq.queues import mirror, unmirror, where
from mqlab.rabbitmq.sampler import ManagementSampler, ProcessSampler, Sampler
from mqlab.sdk import amqp
from mqlab.sdk.urls import host_port
from mqlab.transport import Target


def _policy(marker: str) -> str:
    return f"mqlab-ha-{marker}"


class BrokerSteps:
    """Queue types, queue homes and per-node samples for the steps of one run.

    Nodes are named in the results as the profile names them: ``nodeK`` is the
    node whose AMQP port is the K-th URL's (the management API's listeners say
    which node listens where); a node no URL reaches keeps its own name. An API
    none of whose nodes listens on a URL's port belongs to another broker (a
    guessed port 15672 on a machine running several): it is not used at all.
    """

    def __init__(
        self, api: Management, urls: Sequence[str] = (), pids: Mapping[str, int] | None = None
    ) -> None:
        self.api = api
        self.urls = tuple(urls)
        self.pids = dict(pids or {})
        self._labels: dict[str, str] | None = None

    @property
    def ours(self) -> bool:
        """Whether the management API is the measured broker's (see the class doc)."""
        self.label("")
        return bool(self._labels)

    def _refuse(self) -> str:
        return (
            f"the management API at {self.api.url} does not belong to the broker at "
            f"{', '.join(host_port(u)[0] + ':' + str(host_port(u)[1]) for u in self.urls)}"
        )

    def label(self, node: str) -> str:
        """``nodeK`` for the node the K-th URL reaches, else the node's own name."""
        if self._labels is None:
            self._labels = {}
            try:
                listeners = self.api.overview().get("listeners") or []
            except ManagementError:
                listeners = []
            by_port = {
                int(li["port"]): str(li["node"])
                for li in listeners
                if li.get("protocol") == "amqp" and isinstance(li.get("port"), int)
            }
            for k, url in enumerate(self.urls, 1):
                name = by_port.get(host_port(url)[1])
                if name is not None:
                    self._labels.setdefault(name, f"node{k}")
        return self._labels.get(node, node)

    def sampler(self) -> Sampler:
        """Node processes by PID when known, else the management API, else nothing."""
        if self.pids:
            return ProcessSampler(self.pids)
        return ManagementSampler(self.api) if self.ours else ProcessSampler({})

    async def prepare(self, marker: str, queue_type: str, replicas: int | None) -> None:
        """Set the step's mirroring policy (``mirrored`` only). Raises ManagementError."""
        await asyncio.to_thread(self.label, "")  # learn the node names off the event loop
        if queue_type == "mirrored":
            if not self.ours:
                raise ManagementError(f"cannot mirror the step's queues: {self._refuse()}")
            pattern = "^" + re.escape(marker)
            await asyncio.to_thread(mirror, self.api, pattern, replicas, _policy(marker))

    async def declare(
        self, topics: Sequence[str], exchange: str, durable: bool, queue_type: str
    ) -> None:
        """Declare ``topics``' shared RPC queues and their exchange as the step's servers
        will (a pre-filled step publishes before they start). Raises ManagementError."""
        await asyncio.to_thread(self._declare, topics, exchange, durable, queue_type)

    def _declare(
        self, topics: Sequence[str], exchange: str, durable: bool, queue_type: str
    ) -> None:
        if not self.ours:
            raise ManagementError(f"cannot declare the step's queues: {self._refuse()}")
        targets = [Target(exchange, t, None, False, durable, queue_type=queue_type) for t in topics]
        channel = Declaring(self.api, amqp.vhost_of(self.urls[0]) if self.urls else "/")
        amqp.declare_blocking(
            channel,
            amqp.Declared(),  # the servers, once they consume, delete what they declared
            [amqp.rpc_exchange(t) for t in targets[:1]],
            [amqp.rpc_server_queues(t, "")[0] for t in targets],
        )

    async def inspect(self, marker: str) -> dict[str, Any]:
        """Where the step's queues live and which nodes its connections are on; a
        figure the API cannot give is left out, with ``error`` saying why."""
        return await asyncio.to_thread(self._inspect, marker)

    def _inspect(self, marker: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if not self.ours:
            return {"error": self._refuse()}
        try:
            names = sorted(q["name"] for q in self.api.queues() if marker in str(q.get("name")))
            out["queues"] = [self._home(n) for n in names]
            nodes = Counter(self.label(str(c.get("node"))) for c in self.api.connections())
            out["connections"] = dict(sorted(nodes.items()))
        except ManagementError as exc:
            out["error"] = str(exc)
        return out

    def _home(self, name: str) -> dict[str, Any]:
        home = asdict(where(self.api, name))
        home["leader_node"] = self.label(home["leader"])
        home["replica_nodes"] = sorted(self.label(r) for r in home["replicas"])
        return home

    async def finish(self, marker: str, queue_type: str) -> None:
        """Clear what :meth:`prepare` set and remove the step's quorum queues."""
        await asyncio.to_thread(self._finish, marker, queue_type)

    def _finish(self, marker: str, queue_type: str) -> None:
        if queue_type == "classic" or not self.ours:
            return
        try:
            if queue_type == "mirrored":
                unmirror(self.api, _policy(marker))
            if queue_type == "quorum":
                for q in self.api.queues():
                    name = str(q.get("name"))
                    if marker in name:
                        self.api.delete_queue(name, str(q.get("vhost") or "/"))
        except ManagementError:
            pass  # best effort: a leftover is visible in the broker, the step's figures stand
