"""The environment stated beside every result: versions, broker, machine."""

from __future__ import annotations

import json
import os
import platform
import socket
import urllib.request
from base64 import b64encode
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from urllib.parse import urlsplit

from mqlab import __version__
from mqlab.registry import PluginInfo


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


def broker_version(amqp_url: str, management_port: int = 15672) -> dict[str, Any] | None:
    """Product and version from RabbitMQ's management API next to ``amqp_url``, if it answers."""
    parts = urlsplit(amqp_url)
    if parts.scheme not in ("amqp", "amqps"):
        return None
    host = parts.hostname or "127.0.0.1"
    req = urllib.request.Request(f"http://{host}:{management_port}/api/overview")
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


def gather(
    plugins: dict[str, PluginInfo], broker: dict[str, Any] | None, used: set[str]
) -> dict[str, Any]:
    return {
        "mqlab": __version__,
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
