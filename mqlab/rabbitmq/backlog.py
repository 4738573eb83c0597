"""How many of a step's messages a broker still holds: the drain's second piece of evidence.

The drain after a step's window ends on evidence: the servers' own receipt
clocks, and, for a broker that can tell, the depth of the step's queues. A
message still queued when the drain gives up is *unaccounted*, not lost. Only
RabbitMQ's management API can tell today; a broker that cannot gives ``None``
and the drain decides on receipts alone.
"""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Protocol


class QueueDepth(Protocol):
    async def depth(self, marker: str) -> int | None:
        """Messages in the queues whose name contains ``marker``; None when unknown."""


class RabbitQueueDepth:
    """Queue depth from RabbitMQ's management API (ready + unacknowledged messages)."""

    def __init__(
        self, api_url: str, user: str = "guest", password: str = "guest", amqp_port: int = 0
    ) -> None:
        self.api_url = api_url.rstrip("/")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self._auth = f"Basic {token}"
        self.amqp_port = amqp_port
        self.available = True
        self._checked = False

    def _api(self, path: str) -> object:
        req = urllib.request.Request(f"{self.api_url}{path}")
        req.add_header("Authorization", self._auth)
        with urllib.request.urlopen(req, timeout=2.0) as resp:
            return json.load(resp)

    def _same_node(self) -> bool:
        """A management API guessed beside a URL must be that broker's, not a neighbour's."""
        if not self.amqp_port:
            return True
        overview = self._api("/api/overview")
        listeners = overview.get("listeners", []) if isinstance(overview, dict) else []
        return any(
            li.get("protocol") == "amqp" and li.get("port") == self.amqp_port for li in listeners
        )

    def _get(self, marker: str) -> int | None:
        query = urllib.parse.urlencode(
            {"columns": "name,messages", "name": marker, "page": 1, "page_size": 500}
        )
        try:
            if not self._checked:
                self._checked = True
                if not self._same_node():
                    return None
            queues = self._api(f"/api/queues?{query}")
        except (OSError, urllib.error.URLError, ValueError):
            return None
        if isinstance(queues, dict):  # a paged answer
            queues = queues.get("items", [])
        if not isinstance(queues, list):
            return None
        return sum(int(q.get("messages") or 0) for q in queues if marker in q.get("name", ""))

    async def depth(self, marker: str) -> int | None:
        if not self.available:
            return None
        found = await asyncio.to_thread(self._get, marker)
        if found is None:
            self.available = False  # not there: do not slow every drain tick down
        return found


def rabbit_depth_for(urls: tuple[str, ...], management_url: str | None) -> RabbitQueueDepth | None:
    """The probe for a managed node (its own API) or a given one (port 15672 beside AMQP)."""
    for url in urls:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("amqp", "amqps"):
            continue
        api = management_url or f"http://{parts.hostname or '127.0.0.1'}:15672"
        default = 5671 if parts.scheme == "amqps" else 5672
        return RabbitQueueDepth(
            api,
            urllib.parse.unquote(parts.username or "guest"),
            urllib.parse.unquote(parts.password or "guest"),
            amqp_port=0 if management_url else (parts.port or default),
        )
    return None
