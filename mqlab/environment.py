"""The environment stated beside every result: versions, broker, machine."""

from __future__ import annotations

import json
import os
import platform
import socket
import struct
import subprocess
import urllib.request
from base64 import b64encode
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

from mqlab import __version__
from mqlab.registry import Plugin


def _pkg(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def broker_version(amqp_url: str, management_url: str) -> dict[str, Any] | None:
    """Product, version and Erlang version from the management API of this very broker."""
    parts = urlsplit(amqp_url)
    req = urllib.request.Request(f"{management_url.rstrip('/')}/api/overview")
    user, password = parts.username or "guest", parts.password or "guest"
    req.add_header("Authorization", "Basic " + b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=2) as resp:
            data = json.load(resp)
    except (OSError, ValueError):
        return None
    return {
        "product": data.get("product_name", "RabbitMQ"),
        "version": data.get("product_version") or data.get("rabbitmq_version"),
        "erlang": data.get("erlang_version"),
    }


def amqp_server(amqp_url: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """Product and version an AMQP 0-9-1 broker announces in its ``connection.start``.

    Asked of the broker at the URL itself, so it is always the broker the run
    measures (a management port guessed next to it could belong to another
    node). Only the protocol header is sent; the connection is dropped at once.
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


#: the libraries mqlab's figures depend on: the drivers compared and the harness's own
LIBRARIES = (
    "pika", "aio-pika", "aiormq", "pamqp", "python-qpid-proton", "pyngus", "pyzmq", "kombu",
    "amqp", "oslo.messaging", "nats-py", "aiomqtt", "redis", "msgpack", "uvloop",
    "hdrhistogram", "rich", "psutil",
)  # fmt: skip


def libraries() -> dict[str, str]:
    """Installed versions of the libraries that matter (absent ones left out), libzmq too."""
    found = {name: v for name in LIBRARIES if (v := _pkg(name)) is not None}
    if "pyzmq" in found:
        try:
            import zmq  # a library, not a plugin: its C core's version is a fact of the run

            found["libzmq"] = zmq.zmq_version()
        except ImportError:
            pass
    return found


def mqlab_commit() -> str | None:
    """The git commit mqlab runs from, when it runs from a checkout ("+dirty" if modified)."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5, check=False,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def gather(
    plugins: Mapping[str, Plugin], broker: dict[str, Any] | None, used: set[str]
) -> dict[str, Any]:
    return {
        "mqlab": __version__,
        "mqlab_commit": mqlab_commit(),
        "libraries": libraries(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "uvloop": _pkg("uvloop"),
        "plugins": {
            name: {"package": info.package, "version": info.version}
            for name, info in plugins.items()
            if name in used
        },
        "broker": broker,
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
    }
