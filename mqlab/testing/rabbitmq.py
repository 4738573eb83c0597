"""RabbitMQ's management HTTP API, for tests: what a transport left on the broker.

Standard library only (urllib), so the kit adds no dependency. Use
``leftovers=RabbitMQ(management_url).leftovers`` in a :class:`Subject`.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class RabbitMQ:
    """One broker's management API (default vhost), e.g. ``http://127.0.0.1:15672``."""

    def __init__(self, base: str, user: str = "guest", password: str = "guest") -> None:
        self.base = base.rstrip("/")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.auth = f"Basic {token}"

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
        """Names of the exchanges or queues of the default vhost that contain ``part``."""
        return [e["name"] for e in self.get(f"/api/{kind}/%2F") if part in e["name"]]

    def delete(self, kind: str, name: str) -> None:
        try:
            self.request("DELETE", f"/api/{kind}/%2F/{urllib.parse.quote(name, '')}")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise

    def queue_types(self, tag: str) -> dict[str, str]:
        """The type (``classic``, ``quorum``, ...) of each queue whose name contains ``tag``."""
        queues = self.get("/api/queues/%2F")
        return {q["name"]: q.get("type", "classic") for q in queues if tag in q["name"]}

    def drop(self, tag: str) -> None:
        """Delete every queue and exchange whose name contains ``tag``, durable ones too."""
        for kind in ("queues", "exchanges"):
            for name in self.names(kind, tag):
                self.delete(kind, name)

    def connections(self, worker: str) -> list[str]:
        """Names of the connections whose client-provided name mentions ``worker``.

        AMQP 1.0 connections carry no such name: a leaked one shows through the
        queues its links still consume. The API lists a connection a few seconds late.
        """
        found = []
        for conn in self.get("/api/connections"):
            label = (conn.get("client_properties") or {}).get("connection_name") or ""
            if worker in label:
                found.append(conn["name"])
        return found

    def leftovers(self, tag: str) -> list[str]:
        """Queues, exchanges and connections whose names contain ``tag``."""
        return (
            [f"queue {name}" for name in self.names("queues", tag)]
            + [f"exchange {name}" for name in self.names("exchanges", tag)]
            + [f"connection {name}" for name in self.connections(tag)]
        )
