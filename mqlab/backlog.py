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

    def __init__(self, api_url: str, user: str = "guest", password: str = "guest") -> None:
        self.api_url = api_url.rstrip("/")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self._auth = f"Basic {token}"
        self.available = True

    def _get(self, marker: str) -> int | None:
        query = urllib.parse.urlencode(
            {"columns": "name,messages", "name": marker, "page": 1, "page_size": 500}
        )
        req = urllib.request.Request(f"{self.api_url}/api/queues?{query}")
        req.add_header("Authorization", self._auth)
        try:
            with urllib.request.urlopen(req, timeout=2.0) as resp:
                queues = json.load(resp)
        except (OSError, urllib.error.URLError, ValueError):
            return None
        if isinstance(queues, dict):  # a paged answer
            queues = queues.get("items", [])
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
        return RabbitQueueDepth(
            api,
            urllib.parse.unquote(parts.username or "guest"),
            urllib.parse.unquote(parts.password or "guest"),
        )
    return None
