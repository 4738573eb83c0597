"""Facts about a server stated beside every result: product, version, Erlang.

Two sources: the management API (``/api/overview``) of a node we manage or
were given, and the AMQP 0-9-1 handshake of the broker at the run's URL, which
is asked of the broker itself so it is always the one the run measures (a
management port guessed next to it could belong to another node).
"""

from __future__ import annotations

import socket
import struct
from typing import Any
from urllib.parse import urlsplit

from mqlab.rabbitmq.mgmt import Management, ManagementError


def server_version(
    management_url: str, user: str = "guest", password: str = "guest"
) -> tuple[str, str] | None:
    """(product, version) from the management API, e.g. ("RabbitMQ", "3.10.8"); None if
    the API does not answer."""
    facts = _overview(Management(management_url, user, password, timeout=3))
    if facts is None or not facts["version"]:
        return None
    return str(facts["product"]), str(facts["version"])


def broker_version(amqp_url: str, management_url: str) -> dict[str, Any] | None:
    """Product, version and Erlang version from the management API of this very broker,
    logging in as ``amqp_url``'s user."""
    return _overview(Management.beside(amqp_url, management_url, timeout=2))


def _overview(api: Management) -> dict[str, Any] | None:
    try:
        data = api.overview()
    except (ManagementError, TypeError, ValueError):
        return None
    return {
        "product": data.get("product_name") or "RabbitMQ",
        "version": data.get("product_version") or data.get("rabbitmq_version"),
        "erlang": data.get("erlang_version"),
    }


def amqp_server(amqp_url: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """Product and version an AMQP 0-9-1 broker announces in its ``connection.start``.

    Only the protocol header is sent; the connection is dropped at once.
    """
    parts = urlsplit(amqp_url)
    if parts.scheme != "amqp":
        return None
    try:
        port = parts.port or 5672
        with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(b"AMQP\x00\x00\x09\x01")
            head = _recv_exactly(sock, 7)
            kind, _, size = struct.unpack("!BHI", head)
            payload = _recv_exactly(sock, size)
    except (OSError, ValueError, struct.error):
        return None
    # method frame, class 10 method 10 (connection.start): version bytes, then the table
    if kind != 1 or payload[:4] != b"\x00\x0a\x00\x0a":
        return None
    props = _field_table(payload, 6)
    if "product" not in props:
        return None
    return {"product": props["product"], "version": props.get("version")}


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ValueError("connection closed during the AMQP handshake")
        data += chunk
    return data


def _field_table(buf: bytes, at: int) -> dict[str, str]:
    """The string entries of an AMQP field table; stops at a type it need not read."""
    (length,) = struct.unpack_from("!I", buf, at)
    at += 4
    end = at + length
    out: dict[str, str] = {}
    while at < end:
        klen = buf[at]
        key = buf[at + 1 : at + 1 + klen].decode("utf-8", "replace")
        at += 1 + klen
        kind = buf[at : at + 1]
        at += 1
        if kind in (b"S", b"F", b"x"):  # long string, nested table, byte array: length-prefixed
            (n,) = struct.unpack_from("!I", buf, at)
            if kind == b"S":
                out[key] = buf[at + 4 : at + 4 + n].decode("utf-8", "replace")
            at += 4 + n
        elif kind in (b"t", b"b", b"B"):
            at += 1
        elif kind in (b"s", b"u"):
            at += 2
        elif kind in (b"I", b"i", b"f"):
            at += 4
        elif kind in (b"l", b"d", b"T"):
            at += 8
        else:
            break  # nothing after it can be located; what was read is kept
    return out
