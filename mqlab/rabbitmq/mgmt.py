"""A small client for RabbitMQ's management HTTP API (the parts mqlab uses).

Blocking, standard library only (urllib): it is called at set-up, at status and
from a sampler thread, never on a worker's event loop. Every failure becomes a
:class:`ManagementError` naming the request and what to do.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from base64 import b64encode
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from mqlab.errors import BrokerError
from mqlab.sdk.amqp import ExchangeDecl, QueueDecl

# Fields /api/queues returns without the per-message statistics; keeps a listing small.
_QUEUE_COLUMNS = (
    "name,vhost,type,node,durable,auto_delete,exclusive,arguments,policy,"
    "slave_nodes,synchronised_slave_nodes,leader,members,online,state"
)


class ManagementError(BrokerError):
    """The management API refused or did not answer a request."""

    def __init__(self, message: str, status: int | None = None) -> None:
        self.status = status  # the HTTP status, None if there was no answer
        super().__init__(message)


@dataclass(frozen=True)
class Management:
    """The management API at ``url`` (``http://host:15672``), with these credentials."""

    url: str
    user: str = "guest"
    password: str = "guest"
    timeout: float = 5.0

    @classmethod
    def beside(cls, amqp_url: str, management_url: str, timeout: float = 5.0) -> Management:
        """The API at ``management_url`` with the user and password of ``amqp_url``."""
        parts = urlsplit(amqp_url)
        return cls(management_url, parts.username or "guest", parts.password or "guest", timeout)

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Any:
        """One call; the decoded JSON answer (None for an empty one). Raises ManagementError."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url.rstrip("/") + path, data=data, method=method)
        token = b64encode(f"{self.user}:{self.password}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for key, value in (headers or {}).items():
            req.add_header(key, value)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise ManagementError(
                f"management API {self.url}: {method} {path}: HTTP {exc.code} {exc.reason}",
                exc.code,
            ) from exc
        except OSError as exc:  # URLError, refused, timeouts
            raise ManagementError(
                f"management API {self.url} does not answer ({exc}): is the management "
                "plugin enabled and the URL right?"
            ) from exc
        try:
            return json.loads(raw) if raw.strip() else None
        except ValueError as exc:
            raise ManagementError(f"management API {self.url}: {path} is not JSON") from exc

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    # -- reads ----------------------------------------------------------------

    def overview(self) -> dict[str, Any]:
        return dict(self.get("/api/overview"))

    def nodes(self) -> list[dict[str, Any]]:
        """Every cluster member the API knows, running or not (``running`` says which)."""
        return list(self.get("/api/nodes"))

    def queues(self, vhost: str | None = None) -> list[dict[str, Any]]:
        where = "/api/queues" if vhost is None else f"/api/queues/{_q(vhost)}"
        return list(self.get(f"{where}?columns={_QUEUE_COLUMNS}"))

    def queue(self, name: str, vhost: str = "/") -> dict[str, Any]:
        return dict(self.get(f"/api/queues/{_q(vhost)}/{_q(name)}"))

    def connections(self) -> list[dict[str, Any]]:
        """Client connections with the ``node`` each one is on, its ``name`` and ports."""
        return list(self.get("/api/connections"))

    # -- writes ---------------------------------------------------------------

    def set_policy(
        self,
        name: str,
        pattern: str,
        definition: dict[str, Any],
        apply_to: str = "queues",
        priority: int = 0,
        vhost: str = "/",
    ) -> None:
        body = {
            "pattern": pattern,
            "definition": definition,
            "apply-to": apply_to,
            "priority": priority,
        }
        self.request("PUT", f"/api/policies/{_q(vhost)}/{_q(name)}", body)

    def clear_policy(self, name: str, vhost: str = "/") -> None:
        """Remove a policy; one that does not exist is already cleared."""
        self._delete(f"/api/policies/{_q(vhost)}/{_q(name)}")

    def delete_queue(self, name: str, vhost: str = "/") -> None:
        """Delete a queue, messages and all; one already gone is fine."""
        self._delete(f"/api/queues/{_q(vhost)}/{_q(name)}")

    def close_connection(self, name: str, reason: str = "closed by mqlab") -> None:
        """Close a client connection (the client sees ``reason``); one already gone is fine."""
        self._delete(f"/api/connections/{_q(name)}", {"X-Reason": reason})

    def _delete(self, path: str, headers: dict[str, str] | None = None) -> None:
        """DELETE ``path``; what is already gone (404) is what was asked for."""
        try:
            self.request("DELETE", path, headers=headers)
        except ManagementError as exc:
            if exc.status != 404:
                raise


@dataclass(frozen=True)
class Declaring:
    """The management API as a declaring channel (:class:`mqlab.sdk.amqp.BlockingDeclaringChannel`)
    on ``vhost``: the core declares a step's queues as its plugins would, before they run."""

    api: Management
    vhost: str = "/"

    def declare_exchange(self, decl: ExchangeDecl) -> None:
        body = {"type": decl.type, "durable": decl.durable, "auto_delete": decl.auto_delete}
        self.api.request("PUT", f"/api/exchanges/{_q(self.vhost)}/{_q(decl.name)}", body)

    def declare_queue(self, decl: QueueDecl) -> None:
        body = {
            "durable": decl.durable,
            "auto_delete": decl.auto_delete,
            "arguments": decl.argument_map(),
        }
        self.api.request("PUT", f"/api/queues/{_q(self.vhost)}/{_q(decl.name)}", body)

    def bind(self, queue: str, exchange: str, key: str) -> None:
        path = f"/api/bindings/{_q(self.vhost)}/e/{_q(exchange)}/q/{_q(queue)}"
        self.api.request("POST", path, {"routing_key": key, "arguments": {}})


def _q(part: str) -> str:
    """One path segment, percent-encoded (the default vhost "/" becomes %2F)."""
    return quote(part, safe="")
