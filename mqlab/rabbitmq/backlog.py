"""How many of a step's messages a broker still holds: the drain's second piece of evidence.

The drain after a step's window ends on evidence: the servers' own receipt
clocks, and, for a broker that can tell, the depth of the step's queues. A
message still queued when the drain gives up is *unaccounted*, not lost.

RabbitMQ's management API refreshes a queue's message counts only every
``collect_statistics_interval`` (5 s by default): a queue filled a second ago
reads 0 there. So the API only names the step's queues (a queue is listed as
soon as it is declared); each one's count is read fresh with a passive
``queue.declare`` on the broker's AMQP port (its ``message_count``: ready
messages, counted by the queue itself at that moment), plus the API's
unacknowledged count (messages a consumer holds under its prefetch; stale by up
to 5 s, and at most prefetch x consumers). A broker that cannot tell gives
``None``: a broker with queues whose depth is unknown calls nothing lost.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Protocol

import aiormq
from aiormq.exceptions import AMQPError, ChannelNotFoundEntity

#: how long a broker that answered before is asked again when it does not answer now
RETRY_S = 10.0
#: how the depth is read, as the results state it
SOURCE = (
    "ready: passive queue.declare (fresh); unacknowledged: management API "
    "(refreshed every 5 s); queues named by the management API"
)


class QueueDepth(Protocol):
    async def depth(self, marker: str) -> int | None:
        """Messages in the queues whose name contains ``marker``; None when unknown."""


class RabbitQueueDepth:
    """Queue depth of a RabbitMQ broker: names and unacknowledged counts from its
    management API, ready counts from a passive ``queue.declare`` over AMQP."""

    source = SOURCE

    def __init__(
        self,
        api_url: str,
        user: str = "guest",
        password: str = "guest",
        amqp_port: int = 0,
        amqp_url: str = "",
    ) -> None:
        self.amqp_url = amqp_url
        self.api_url = api_url.rstrip("/")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self._auth = f"Basic {token}"
        self.amqp_port = amqp_port
        self.available = True
        self._checked = False
        # a broker mqlab started or was told the API of is expected to answer; one whose
        # API was guessed only once it has
        self._answers = amqp_port == 0

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

    def _queues(self, marker: str) -> list[tuple[str, str, int]] | None:
        """(vhost, name, unacknowledged) of every queue whose name holds ``marker``."""
        query = urllib.parse.urlencode(
            {
                "columns": "name,vhost,messages_unacknowledged",
                "name": marker,
                "page": 1,
                "page_size": 500,
            }
        )
        try:
            if not self._checked:
                if not self._same_node():
                    self.available = False  # a neighbour's API: never this broker's depth
                    return None
                self._checked = True
            queues = self._api(f"/api/queues?{query}")
        except (OSError, urllib.error.URLError, ValueError):
            return None
        if isinstance(queues, dict):  # a paged answer
            queues = queues.get("items", [])
        if not isinstance(queues, list):
            return None
        return [
            (str(q.get("vhost") or "/"), str(q["name"]), int(q.get("messages_unacknowledged") or 0))
            for q in queues
            if isinstance(q, dict) and marker in str(q.get("name", ""))
        ]

    async def _ready(self, names: list[str]) -> int | None:
        """Ready messages of ``names`` now, each queue's own count (passive declare)."""
        if not names:
            return 0
        if not self.amqp_url:
            return None
        total = 0
        try:
            conn = await asyncio.wait_for(aiormq.connect(self.amqp_url), 5.0)
        except (AMQPError, OSError, TimeoutError):
            return None
        try:
            channel = await conn.channel()
            for name in names:
                try:
                    ok = await asyncio.wait_for(channel.queue_declare(name, passive=True), 5.0)
                except ChannelNotFoundEntity:
                    channel = await conn.channel()  # gone since listed: none left in it
                    continue
                total += int(ok.message_count or 0)
        except (AMQPError, OSError, TimeoutError):
            return None
        finally:
            await asyncio.gather(conn.close(), return_exceptions=True)
        return total

    async def _depth(self, marker: str) -> tuple[int, int] | None:
        queues = await asyncio.to_thread(self._queues, marker)
        if queues is None:
            return None
        vhost = urllib.parse.unquote(urllib.parse.urlsplit(self.amqp_url).path[1:] or "/")
        names = [name for v, name, _ in queues if v == vhost]
        ready = await self._ready(names)
        if ready is None:
            return None
        return ready, sum(unacked for _, _, unacked in queues)

    async def parts(self, marker: str) -> tuple[int, int] | None:
        """(ready, unacknowledged) of the step's queues: the first counted now, the second
        from the management API's statistics (as stale as their interval)."""
        if not self.available:
            return None
        found = await self._depth(marker)
        if found is None and self._answers:
            # a broker that answers but not now is most likely a node coming back from a
            # fault event (its management plugin starts seconds after its AMQP port): ask
            # again for a while rather than call the step's depth unknown
            deadline = time.monotonic() + RETRY_S
            while found is None and self.available and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                found = await self._depth(marker)
        if found is None:
            if not self._answers:
                self.available = False  # never there: do not slow every drain tick down
            return None
        self._answers = True
        return found

    async def depth(self, marker: str) -> int | None:
        found = await self.parts(marker)
        return None if found is None else sum(found)


def rabbit_depth_for(
    urls: tuple[str, ...], management_url: str | None, given: str = ""
) -> RabbitQueueDepth | None:
    """The probe for a managed node (its own API) or a given one (the profile's
    ``management_url``, else port 15672 beside AMQP; checked to be that node's)."""
    for url in urls:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("amqp", "amqps"):
            continue
        api = management_url or given or f"http://{parts.hostname or '127.0.0.1'}:15672"
        default = 5671 if parts.scheme == "amqps" else 5672
        return RabbitQueueDepth(
            api,
            urllib.parse.unquote(parts.username or "guest"),
            urllib.parse.unquote(parts.password or "guest"),
            amqp_port=0 if management_url else (parts.port or default),
            amqp_url=url,
        )
    return None
