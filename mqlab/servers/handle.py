"""What a managed server is to mqlab: the handle of a running one, and how one kind starts.

Every starter (RabbitMQ in :mod:`mqlab.servers.managed`, the daemons in
:mod:`mqlab.servers.daemons`) returns a :class:`ServerHandle`; the run records its facts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class ServerHandle:
    """A running managed server: where to reach it and what to record about it."""

    kind: str  # the Features.server name, e.g. "rabbitmq"
    label: str  # for progress lines, e.g. "RabbitMQ node mqlab-5673@localhost"
    urls: tuple[str, ...]  # what the drivers of this server connect to
    pids: tuple[int, ...]  # OS processes whose CPU the run samples
    state_dir: Path  # everything the server wrote; given back to stop()
    #: product, version and the like, for the results' environment
    facts: Mapping[str, Any] = field(default_factory=dict)
    #: an HTTP API that can tell queue depths (RabbitMQ's management API), if any
    management_url: str | None = None
    #: node name -> pid, in node order, for per-node figures
    node_pids: Mapping[str, int] = field(default_factory=dict)
    #: node name -> its own Prometheus endpoint (RabbitMQ's rabbitmq_prometheus), if any
    metrics_urls: Mapping[str, str] = field(default_factory=dict)
    #: the broker host it runs on (``[hosts] brokers``); "" : this machine
    host: str = ""


class ManagedServer(Protocol):
    """How mqlab starts and stops one kind of server in a private state dir."""

    label: str  # "RabbitMQ", for "starting a private RabbitMQ node…"

    def installed(self) -> str | None:
        """None when the server can be started here, else what to install (one line)."""

    def start(self, state_dir: Path, nodes: int = 1) -> ServerHandle:
        """Start a private server (of ``nodes`` clustered nodes where the kind can) in
        ``state_dir``; BrokerError (one line) if it cannot."""

    def stop(self, handle: ServerHandle) -> None:
        """Stop it; BrokerError if it would not stop."""

    def probe(self, url: str) -> tuple[dict[str, Any] | None, int | None]:
        """Facts about a server mqlab did not start, and its pid if it runs here (best effort)."""
