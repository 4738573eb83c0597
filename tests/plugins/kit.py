"""What the broker-backed plugin tests share: RabbitMQ's management API and polling."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any


class Mgmt:
    """RabbitMQ's management HTTP API, through the standard library only."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")
        self.auth = "Basic " + base64.b64encode(b"guest:guest").decode()

    def request(self, method: str, path: str) -> Any:
        req = urllib.request.Request(
            self.base + path, method=method, headers={"Authorization": self.auth}
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            data = resp.read()
        return json.loads(data) if data else None

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def entity(self, kind: str, name: str) -> dict[str, Any] | None:
        """One exchange or queue of the default vhost; None if the broker has none."""
        try:
            found: dict[str, Any] = self.get(f"/api/{kind}/%2F/{urllib.parse.quote(name, '')}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        return found

    def queue(self, name: str) -> dict[str, Any] | None:
        return self.entity("queues", name)

    def names(self, kind: str, part: str) -> list[str]:
        return [e["name"] for e in self.get(f"/api/{kind}/%2F") if part in e["name"]]

    def consumers(self, part: str) -> list[dict[str, Any]]:
        return [c for c in self.get("/api/consumers/%2F") if part in c["queue"]["name"]]

    def delete(self, kind: str, name: str) -> None:
        try:
            self.request("DELETE", f"/api/{kind}/%2F/{urllib.parse.quote(name, '')}")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise

    def connections(self, worker: str) -> list[str]:
        """Names of the connections whose client-provided name mentions ``worker``."""
        found = []
        for conn in self.get("/api/connections"):
            label = (conn.get("client_properties") or {}).get("connection_name") or ""
            if worker in label:
                found.append(conn["name"])
        return found

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
