"""RabbitMQ's specifics in one place: private nodes and clusters, the management
API, server facts, queue types and per-node broker figures.

Modules, one concept each:

- :mod:`~mqlab.rabbitmq.node`: one node's files, environment, launch, readiness, stop
- :mod:`~mqlab.rabbitmq.cluster`: 1-5 nodes started, joined, inspected and stopped together
- :mod:`~mqlab.rabbitmq.state`: the records a later ``mqlab broker status``/``stop`` reads
- :mod:`~mqlab.rabbitmq.host`: processes by PID, loopback ports, epmd
- :mod:`~mqlab.rabbitmq.mgmt`: the management HTTP API client
- :mod:`~mqlab.rabbitmq.facts`: product and version of the broker a run measures
- :mod:`~mqlab.rabbitmq.queues`: mirrored policies, quorum declares, where a queue lives
- :mod:`~mqlab.rabbitmq.sampler`: CPU and memory per node, one sample a second
- :mod:`~mqlab.rabbitmq.backlog`: how many of a step's messages the broker still holds
"""

from mqlab.rabbitmq.cluster import Cluster, Member, members, start, status, stop
from mqlab.rabbitmq.facts import server_version
from mqlab.rabbitmq.host import find_pid
from mqlab.rabbitmq.mgmt import Management, ManagementError
from mqlab.rabbitmq.node import BrokerNode, installed
from mqlab.rabbitmq.state import default_state_dir

__all__ = [
    "BrokerNode",
    "Cluster",
    "Management",
    "ManagementError",
    "Member",
    "default_state_dir",
    "find_pid",
    "installed",
    "members",
    "server_version",
    "start",
    "status",
    "stop",
]
