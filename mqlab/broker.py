"""Kept for code written before :mod:`mqlab.rabbitmq`: the same names, re-exported."""

from mqlab.rabbitmq import (
    BrokerNode,
    Cluster,
    default_state_dir,
    find_pid,
    installed,
    members,
    server_version,
    start,
    status,
    stop,
)

__all__ = [
    "BrokerNode",
    "Cluster",
    "default_state_dir",
    "find_pid",
    "installed",
    "members",
    "server_version",
    "start",
    "status",
    "stop",
]
