"""What the broker-backed plugin tests share: RabbitMQ's management API and polling."""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from mqlab.testing import RabbitMQ


class Mgmt(RabbitMQ):
    """The kit's management API client, plus what fault-injection tests need."""

    def consumers(self, part: str) -> list[dict[str, Any]]:
        return [c for c in self.get("/api/consumers/%2F") if part in c["queue"]["name"]]

    def consumed_queues(self, worker: str) -> set[str]:
        """Queues consumed on the connections of ``worker``."""
        mine = set(self.connections(worker))
        found = set()
        for consumer in self.get("/api/consumers/%2F"):
            details = consumer.get("channel_details")
            # the API sends [] instead of {} until it knows the channel
            if isinstance(details, dict) and details.get("connection_name") in mine:
                found.add(consumer["queue"]["name"])
        return found

    def close_connection(self, name: str) -> None:
        self.request("DELETE", f"/api/connections/{urllib.parse.quote(name, '')}")


async def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.01)
