"""A replicated managed Artemis: ``[broker] nodes = 2`` (or more) starts a primary and a
backup that replicates it, as seed 001's ActiveMQ ran replicated.

Both are the embedded broker of :mod:`mqlab.servers.artemis`, each with its own journal
(``node1`` the primary, ``node2`` the backup), an AMQP acceptor for clients and a CORE
acceptor on which the pair's cluster connection runs. Artemis' replication HA policy:
the primary sends every durable message to the backup's journal before it accepts it, so
an accepted message survives the primary; the backup serves nothing while the primary
lives, then activates when it loses it (clients must connect to it: its URL is the
second). The primary checks for an active backup when it starts again (``start_node
node1`` after a kill), takes the journal back and the backup returns to waiting
(``allow-failback``). The pair is ready once the primary serves and the backup says it
is in sync. Artemis pairs nodes; more than two are not clustered here (the label says so).
A single broker (``nodes = 1``, :mod:`mqlab.servers.artemis`) is node1 of its own: node
events stop, kill and start it on its port and journal as they do the primary.
A start cut short (a failure, Ctrl-C, SIGTERM) stops both JVMs; a failed one names its
log, which the run keeps.
"""

from __future__ import annotations

import time
from pathlib import Path

from mqlab.errors import BrokerError
from mqlab.servers import artemis
from mqlab.servers.daemons import free_port
from mqlab.servers.handle import ServerHandle
from mqlab.servers.nodes import ProcessNode, ProcessNodes

#: what each node logs once it does its part: the primary serves, the backup is in sync
#: with it; a backup that took over logs AMQ221010
PRIMARY_READY = artemis._ACTIVE
BACKUP_READY = "AMQ221024"
BACKUP_ACTIVE = "AMQ221010"

_POLICY = {
    "primary": "<primary><check-for-active-server>true</check-for-active-server></primary>",
    "backup": "<backup><allow-failback>true</allow-failback></backup>",
}


def broker_xml(amqp: int, core: int, peer: int, role: str) -> str:
    """The embedded broker's configuration, with a CORE acceptor, the pair's cluster
    connection and the replication policy of ``role`` (primary or backup)."""
    cluster = f"""
    <cluster-user>mqlab-cluster</cluster-user>
    <cluster-password>mqlab-cluster</cluster-password>
    <connectors>
      <connector name="self">tcp://127.0.0.1:{core}</connector>
      <connector name="peer">tcp://127.0.0.1:{peer}</connector>
    </connectors>
    <cluster-connections>
      <cluster-connection name="mqlab-pair">
        <connector-ref>self</connector-ref>
        <static-connectors><connector-ref>peer</connector-ref></static-connectors>
      </cluster-connection>
    </cluster-connections>
    <ha-policy><replication>{_POLICY[role]}</replication></ha-policy>
  </core>"""
    core_acceptor = (
        f'<acceptor name="core">tcp://127.0.0.1:{core}?protocols=CORE</acceptor>\n    </acceptors>'
    )
    xml = artemis._BROKER_XML.format(port=amqp)
    return xml.replace("</acceptors>", core_acceptor, 1).replace("\n  </core>", cluster, 1)


class ReplicatedArtemis(artemis.Artemis):
    """The managed Artemis: one broker, or a primary and its backup (``nodes`` > 1)."""

    def start(self, state_dir: Path, nodes: int = 1) -> ServerHandle:
        if nodes == 1:
            handle = super().start(state_dir, nodes)
            self.nodes[state_dir] = self._alone(handle)  # stop() ends a restarted JVM too
            return handle
        problem = self.installed()
        if problem:
            raise BrokerError(problem)
        artemis.fetch()
        state_dir.mkdir(parents=True, exist_ok=True)
        amqp = [free_port(), free_port()]
        core = [free_port(), free_port()]
        made = []
        for k, role in enumerate(("primary", "backup")):
            where = state_dir / f"node{k + 1}"
            argv = self.launch(where).argv  # the single broker's command line, in this dir
            xml = broker_xml(amqp[k], core[k], core[1 - k], role)
            (where / "etc" / "broker.xml").write_text(xml)  # in place of the single one's
            made.append(ProcessNode(k + 1, argv, where, where / "server.log"))
        pair = ProcessNodes("Artemis", made, self._spawn, self._node_ready, self._terminate)
        with self._starting():  # Ctrl-C or SIGTERM from here on leaves no JVM behind
            starts = [pair.launch(1), pair.launch(2)]
            for node, at in zip(made, starts, strict=True):
                self._node_ready(node, at)
        self.nodes[state_dir] = pair  # stop() ends them, a restarted node's process too
        facts = {
            "product": "Artemis", "version": artemis.VERSION, "port": amqp[0], "nodes": 2,
            "ha_policy": "replication",
        }  # fmt: skip
        more = "" if nodes == 2 else f" ({nodes} nodes asked: Artemis pairs a primary and a backup)"
        return ServerHandle(
            self.kind,
            f"Artemis {artemis.VERSION} primary on 127.0.0.1:{amqp[0]} and its replicating "
            f"backup on 127.0.0.1:{amqp[1]}{more}",
            tuple(f"amqp://guest:guest@127.0.0.1:{p}" for p in amqp),
            pair.pids(),
            state_dir,
            facts,
        )

    def _alone(self, handle: ServerHandle) -> ProcessNodes:
        """The single broker as node1, so that node fault events act on it as on a pair's
        primary: stopped or killed by PID, then its own command line again (its port, its
        journal)."""
        pid, where = handle.pids[0], handle.state_dir
        node = ProcessNode(1, self._launched[pid].argv, where, where / "server.log")
        node.proc = self._children[pid]
        return ProcessNodes("Artemis", [node], self._spawn, self._node_ready, self._terminate)

    def _node_ready(self, node: ProcessNode, start: int) -> None:
        """Wait until the node does its part (see the module's doc); BrokerError if not."""
        want = PRIMARY_READY if node.place == 1 else BACKUP_READY
        deadline = time.monotonic() + self.ready_within
        while True:
            with node.log.open("rb") as f:
                f.seek(start)  # this start's lines
                text = f.read().decode(errors="replace")
            # a restarted primary finds its backup active and syncs back before it serves
            if want in text or (node.place == 2 and BACKUP_ACTIVE in text):
                return
            proc = node.proc
            if proc is None or proc.poll() is not None or time.monotonic() > deadline:
                if proc is not None:
                    self._terminate(proc)
                why = artemis.cause(node.log) or f"not ready within {self.ready_within:g}s"
                raise BrokerError(
                    f"the private Artemis node{node.place} did not start (log {node.log}): {why}"
                )
            time.sleep(0.1)
