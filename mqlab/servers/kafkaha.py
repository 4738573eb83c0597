"""A replicated managed Kafka: ``[broker] nodes = 3`` starts three KRaft nodes (each a
broker and a controller, the three the controller quorum), every topic on three of them
(``default.replication.factor``, the internal topics too) and ``min.insync.replicas`` 2:
a producer with ``acks = all`` is answered once two of the three have the record, so one
node may die without losing one. Kafka acknowledges a record in the page cache of those
nodes, not on their disks (its default flush settings): "replicated" here means on two
machines' memory at least, never fsynced first.

Each node has its own directory (``nodeK``: its configuration, data and log) and ports;
the data an earlier run in the same state dir left is wiped (only a data directory mqlab
made: anything else there is refused and kept, as for one node), the three are formatted
with one cluster id and started together (a node serves once a quorum of controllers
does). A start cut short (a failure, Ctrl-C, SIGTERM) stops every node it began; a failed
one names its log, which the run keeps.
With 2, 4 or 5 nodes the replication factor is min(nodes, 3) and ``min.insync.replicas``
one less. The nodes are mqlab's children, acted on by place for fault events
(:mod:`mqlab.servers.nodes`) and stopped by PID.
"""

from __future__ import annotations

from pathlib import Path

from mqlab.errors import BrokerError
from mqlab.servers import kafka
from mqlab.servers.daemons import free_port
from mqlab.servers.handle import ServerHandle
from mqlab.servers.nodes import ProcessNode, ProcessNodes

#: the copies of each record a replicated cluster keeps, at most
REPLICAS = 3


class ReplicatedKafka(kafka.KafkaServer):
    """The managed Kafka: one node, or a replicated cluster of ``nodes``."""

    def start(self, state_dir: Path, nodes: int = 1) -> ServerHandle:
        if nodes == 1:
            return super().start(state_dir, nodes)
        java = self._java()
        try:
            kafka.JARS.fetch()
        except (OSError, ValueError) as exc:
            raise BrokerError(
                f"Kafka {kafka.VERSION}: its jars could not be fetched: {exc}"
            ) from None
        return start(self, java, state_dir, nodes)


def start(server: kafka.KafkaServer, java: str, state_dir: Path, count: int) -> ServerHandle:
    """Start ``count`` KRaft nodes as one cluster; BrokerError (one line) if one cannot.
    Whatever ends a start early (a failure, Ctrl-C, SIGTERM) stops every node it began."""
    replicas = min(count, REPLICAS)
    insync = max(1, replicas - 1)
    state_dir.mkdir(parents=True, exist_ok=True)
    ports = [(free_port(), free_port()) for _ in range(count)]
    voters = ",".join(f"{k}@127.0.0.1:{c}" for k, (_, c) in enumerate(ports, 1))
    made: list[ProcessNode] = []
    for k, (port, controller) in enumerate(ports, 1):
        where = state_dir / f"node{k}"
        where.mkdir(exist_ok=True)
        kafka.fresh_data(where / "data")  # an earlier run's wiped, anything else refused
        conf = where / "server.properties"
        conf.write_text(kafka.properties(where, port, controller, k, voters, replicas))
        (where / "log4j.properties").write_text(kafka.LOG4J)
        (where / "tools-log4j.properties").write_text(kafka.TOOL_LOG4J)
        logging = f"-Dlog4j.configuration=file:{where / 'log4j.properties'}"
        argv = [java, *kafka.JVM, logging, "-cp", kafka.JARS.classpath(), "kafka.Kafka", str(conf)]
        made.append(ProcessNode(k, argv, where, where / "server.log"))

    def ready(node: ProcessNode, start: int) -> None:
        assert node.proc is not None
        server._wait_ready(node.proc, node.log, start, ports[node.place - 1][0])

    nodes = ProcessNodes("Kafka", made, server._spawn, ready, server._terminate)
    cid = kafka.cluster_id()
    with server._starting():  # Ctrl-C or SIGTERM from here on leaves no JVM behind
        for node in made:
            server._format(java, node.cwd / "server.properties", node.cwd, cid)
        # together: a node serves only once a quorum of the controllers runs
        starts = [nodes.launch(n.place) for n in made]
        for node, at in zip(made, starts, strict=True):
            ready(node, at)
    server.nodes[state_dir] = nodes  # stop() ends them, a restarted node's process too
    facts = {
        "product": "Kafka", "version": kafka.VERSION, "port": ports[0][0], "mode": "KRaft",
        "nodes": count, "replication_factor": replicas, "min_insync_replicas": insync,
    }  # fmt: skip
    on = ", ".join(f"127.0.0.1:{p}" for p, _ in ports)
    return ServerHandle(
        server.kind,
        f"Kafka {kafka.VERSION} cluster of {count} KRaft nodes on {on} (replication "
        f"{replicas}, min.insync.replicas {insync})",
        tuple(f"kafka://127.0.0.1:{p}" for p, _ in ports),
        nodes.pids(),
        state_dir,
        facts,
    )
