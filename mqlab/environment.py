"""The environment stated beside every result: versions, broker, machine."""

from __future__ import annotations

import os
import platform
import socket
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from mqlab import __version__

# The broker's facts are RabbitMQ's specifics; they live in mqlab.rabbitmq.facts.
from mqlab.rabbitmq.facts import amqp_server, broker_version
from mqlab.registry import PluginInfo

__all__ = ["amqp_server", "broker_version", "cpu_model", "gather"]


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
