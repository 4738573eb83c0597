"""The environment stated beside every result: versions, broker, machine, and what on the
machine makes figures move (:mod:`mqlab.machine`, ``system``)."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from collections.abc import Iterable, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import psutil

from mqlab import __version__, native, registry
from mqlab.errors import MqlabError

# The broker's facts are RabbitMQ's specifics; they live in mqlab.rabbitmq.facts.
from mqlab.rabbitmq.facts import amqp_server, broker_version
from mqlab.record.trust import Fact
from mqlab.record.wire import to_wire
from mqlab.registry import Plugin

__all__ = ["amqp_server", "broker_version", "cpu_model", "gather", "promises", "servers"]


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


#: the libraries mqlab's figures depend on: the drivers compared and the harness's own
LIBRARIES = (
    "pika", "aio-pika", "aiormq", "pamqp", "python-qpid-proton", "pyngus", "pyzmq", "kombu",
    "amqp", "oslo.messaging", "nats-py", "aiomqtt", "redis", "aiokafka", "confluent-kafka",
    "msgpack", "uvloop",
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
    root = Path(__file__).resolve().parents[2]  # mqlab/results/environment.py -> the checkout
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


def _rebuild(plugin: str) -> dict[str, str]:
    """``{"rebuild_of": ...}`` when the plugin is mqlab's rebuild of another driver."""
    try:
        what = registry.get(plugin).cls.rebuild_of
    except MqlabError:
        return {}
    return {"rebuild_of": what} if what else {}


def promises(kind: str, facts: Mapping[str, Any]) -> dict[str, str]:
    """What "durable" and "replicated" meant on a managed server in the mode it ran (its
    facts), so that a durable step on one broker is read against the same words on another;
    nothing for a kind mqlab does not say it for."""
    nodes = int(facts.get("nodes") or 1)
    if kind == "rabbitmq":
        return {
            "durable": "a durable queue's persistent message is on disk before the publisher's "
            "confirm (classic: on the queue's one node; quorum: in the Raft log of a majority "
            "of its members); without confirms the publisher learns nothing",
            "replicated": "no: one node"
            if nodes == 1
            else f"by queue type, on {nodes} nodes: classic, no (a queue and its messages are "
            "on one node, gone while it is down); mirrored, copies on the others kept by an "
            "ha policy (RabbitMQ 3.x); quorum, Raft: a confirm once a majority has it on disk",
        }
    if kind == "kafka":
        rf, isr = facts.get("replication_factor", 1), facts.get("min_insync_replicas", 1)
        return {
            "durable": "a record is appended to its partition's log before the producer's ack, "
            "in the page cache: Kafka's default flush leaves the write to disk to the OS, so a "
            "record acked by one broker alone is lost if that machine fails before the flush",
            "replicated": "no: one broker, replication 1"
            if nodes == 1
            else f"{nodes} brokers, replication {rf}, min.insync.replicas {isr}: with acks = all "
            f"a record is answered once {isr} of its {rf} brokers have it, in memory (topics the "
            f"kafka plugin creates need replicas = {rf})",
        }
    if kind == "artemis":
        return {
            "durable": "a durable message is written to the journal (synced) before the broker "
            "accepts it",
            "replicated": "no: one broker"
            if nodes == 1
            else "a primary and a backup (replication): the primary sends each durable message "
            "to the backup's journal before it accepts it; the backup activates when the "
            "primary dies, for clients that connect to it (mqlab's amqp1 does not reconnect)",
        }
    if kind in ("redis", "mosquitto"):
        return {"durable": "no: in memory only (started without persistence)", "replicated": "no"}
    return {}


def servers(handles: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every managed server's facts (``handles``: kind -> its ServerHandle), with what
    durable and replicated meant on it."""
    return {
        kind: {"managed": True, **h.facts, **promises(kind, h.facts)} for kind, h in handles.items()
    }


def gather(
    plugins: Mapping[str, Plugin],
    broker: dict[str, Any] | None,
    used: set[str],
    system: Iterable[Fact] = (),
) -> dict[str, Any]:
    """``system``: the machine's facts as the run began (:func:`mqlab.machine.facts`)."""
    return {
        "mqlab": __version__,
        "mqlab_commit": mqlab_commit(),
        "libraries": libraries(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "uvloop": _pkg("uvloop"),
        # the per-message path's modules: compiled (mypyc) or pure Python, and why
        "harness": native.status(),
        "plugins": {
            name: {"package": info.package, "version": info.version, **_rebuild(name)}
            for name, info in plugins.items()
            if name in used
        },
        "broker": broker,
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "system": [to_wire(f) for f in system],
    }
