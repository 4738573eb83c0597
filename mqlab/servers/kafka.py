"""A managed Kafka broker: one KRaft node (broker and controller, no ZooKeeper) from Maven jars.

Its jars are ``org.apache.kafka:kafka_2.13`` and what it loads at run time
(:data:`JARS`, cached under ``~/.cache/mqlab/kafka-<version>``; fetched on
first use, or by ``python -m mqlab.servers.kafka`` from ``scripts/setup.sh``),
plus reload4j so that what the broker logs, its reason for not starting
included, reaches ``server.log`` in the state dir. Each start takes two free
loopback ports (clients, controller), wipes the data directory an earlier run
in the same state dir left (only one mqlab made: a ``data`` it did not make is
refused and kept), formats a new one (``kafka-storage format``, a new cluster
id) and starts ``kafka.Kafka`` as a child process with a small heap; the broker
is ready once it logs "Kafka Server started". Stopped by its PID, also when the
start is cut short (a failure, Ctrl-C, SIGTERM): no JVM outlives it.

A broker that cannot start (no Java, a jar that cannot be fetched, a port
taken, a data directory the format refuses) is one :class:`BrokerError` line
naming Kafka and the cause, as Kafka itself stated it.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

from mqlab import maven
from mqlab.errors import BrokerError, BrokerRefused
from mqlab.servers.daemons import ChildServers, free_port
from mqlab.servers.handle import ServerHandle

VERSION = "3.9.2"

#: the broker's runtime classpath, as ``mvn dependency:list -DincludeScope=runtime``
#: resolved ``org.apache.kafka:kafka_2.13:3.9.2`` plus ``org.slf4j:slf4j-reload4j``
#: (Kafka's own distribution logs through it; without a binding it would log nothing)
JARS = maven.JarSet(
    f"kafka-{VERSION}",
    maven.jars(
        [
            ("at.yawk.lz4", "lz4-java", "1.10.1"),
            ("ch.qos.reload4j", "reload4j", "1.2.19"),
            ("com.fasterxml.jackson.core", "jackson-annotations", "2.16.2"),
            ("com.fasterxml.jackson.core", "jackson-core", "2.16.2"),
            ("com.fasterxml.jackson.core", "jackson-databind", "2.16.2"),
            ("com.fasterxml.jackson.dataformat", "jackson-dataformat-csv", "2.16.2"),
            ("com.fasterxml.jackson.datatype", "jackson-datatype-jdk8", "2.16.2"),
            ("com.fasterxml.jackson.module", "jackson-module-scala_2.13", "2.16.2"),
            ("com.github.ben-manes.caffeine", "caffeine", "2.9.3"),
            ("com.github.luben", "zstd-jni", "1.5.6-4"),
            ("com.google.errorprone", "error_prone_annotations", "2.10.0"),
            ("com.thoughtworks.paranamer", "paranamer", "2.8"),
            ("com.typesafe.scala-logging", "scala-logging_2.13", "3.9.5"),
            ("com.yammer.metrics", "metrics-core", "2.2.0"),
            ("commons-beanutils", "commons-beanutils", "1.11.0"),
            ("commons-cli", "commons-cli", "1.4"),
            ("commons-collections", "commons-collections", "3.2.2"),
            ("commons-digester", "commons-digester", "2.1"),
            ("commons-io", "commons-io", "2.14.0"),
            ("commons-logging", "commons-logging", "1.3.5"),
            ("commons-validator", "commons-validator", "1.10.1"),
            ("io.dropwizard.metrics", "metrics-core", "4.1.12.1"),
            ("io.netty", "netty-buffer", "4.1.105.Final"),
            ("io.netty", "netty-codec", "4.1.105.Final"),
            ("io.netty", "netty-common", "4.1.105.Final"),
            ("io.netty", "netty-handler", "4.1.105.Final"),
            ("io.netty", "netty-resolver", "4.1.105.Final"),
            ("io.netty", "netty-transport-classes-epoll", "4.1.105.Final"),
            ("io.netty", "netty-transport-native-epoll", "4.1.105.Final"),
            ("io.netty", "netty-transport-native-unix-common", "4.1.105.Final"),
            ("io.netty", "netty-transport", "4.1.105.Final"),
            ("net.sf.jopt-simple", "jopt-simple", "5.0.4"),
            ("net.sourceforge.argparse4j", "argparse4j", "0.7.0"),
            ("org.apache.kafka", "kafka-clients", VERSION),
            ("org.apache.kafka", "kafka-group-coordinator-api", VERSION),
            ("org.apache.kafka", "kafka-group-coordinator", VERSION),
            ("org.apache.kafka", "kafka-metadata", VERSION),
            ("org.apache.kafka", "kafka-raft", VERSION),
            ("org.apache.kafka", "kafka-server-common", VERSION),
            ("org.apache.kafka", "kafka-server", VERSION),
            ("org.apache.kafka", "kafka-storage-api", VERSION),
            ("org.apache.kafka", "kafka-storage", VERSION),
            ("org.apache.kafka", "kafka-tools-api", VERSION),
            ("org.apache.kafka", "kafka-transaction-coordinator", VERSION),
            ("org.apache.kafka", "kafka_2.13", VERSION),
            ("org.apache.yetus", "audience-annotations", "0.12.0"),
            ("org.apache.zookeeper", "zookeeper-jute", "3.8.4"),
            ("org.apache.zookeeper", "zookeeper", "3.8.4"),
            ("org.bitbucket.b_c", "jose4j", "0.9.6"),
            ("org.pcollections", "pcollections", "4.0.1"),
            ("org.scala-lang.modules", "scala-collection-compat_2.13", "2.10.0"),
            ("org.scala-lang.modules", "scala-java8-compat_2.13", "1.0.2"),
            ("org.scala-lang", "scala-library", "2.13.15"),
            ("org.scala-lang", "scala-reflect", "2.13.15"),
            ("org.slf4j", "slf4j-api", "1.7.36"),
            ("org.slf4j", "slf4j-reload4j", "1.7.36"),
            ("org.xerial.snappy", "snappy-java", "1.1.10.5"),
        ]
    ),
)

#: seconds the JVM may take to format, then to start the broker (class loading on a
#: busy 2-CPU machine took 4 to 9 s)
FORMAT_WITHIN = 60.0
READY_WITHIN = 60.0

#: a small, fixed heap: start-up is faster and the broker's CPU and memory stay
#: comparable run to run (Kafka's own scripts give 1 GB); G1 as those scripts use
HEAP = ["-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"]
JVM = [*HEAP, "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true"]
TOOL_JVM = ["-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]

READY_LINE = "Kafka Server started"
#: in the data directory: mqlab made it, so a later start may wipe it (Kafka reads only
#: sub-directories of a log dir as partitions, and ``meta.properties``)
DATA_MARK = ".mqlab-data"
_CAUSE = re.compile(r"(?:^|\s)(?:[\w$]+\.)+[\w$]*(?:Exception|Error): (.+)$")

LOG4J = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.org.apache.kafka.clients=WARN
"""
#: the format tool: its errors only (at INFO it prints the whole broker configuration)
TOOL_LOG4J = LOG4J.replace("rootLogger=INFO", "rootLogger=WARN")


def cluster_id() -> str:
    """A new cluster id as ``kafka-storage random-uuid`` prints one (URL-safe base64).

    Never one starting with "-", as Kafka's own never does: ``format -t -xyz`` reads it as
    an option ("-t: expected one argument"), which failed one start in 64."""
    while True:
        found = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not found.startswith("-"):
            return found


def properties(
    state_dir: Path,
    port: int,
    controller: int,
    node_id: int = 1,
    voters: str = "",
    replicas: int = 1,
) -> str:
    """One node as broker and controller on loopback; everything single-replica, unless it
    is one of ``voters`` (``1@127.0.0.1:PORT,2@...``: a replicated cluster, each topic and
    internal topic on ``replicas`` nodes, a write acked with ``acks = all`` once all but one
    of them have it)."""
    insync = max(1, replicas - 1)
    return "\n".join(
        [
            "process.roles=broker,controller",
            f"node.id={node_id}",
            f"controller.quorum.voters={voters or f'1@127.0.0.1:{controller}'}",
            f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name=PLAINTEXT",
            f"log.dirs={state_dir / 'data'}",
            f"default.replication.factor={replicas}",
            f"min.insync.replicas={insync}",
            f"offsets.topic.replication.factor={replicas}",
            # the offsets topic is created at the first group's join: 50 partitions
            # (the default) cost seconds there, and one node needs few
            "offsets.topic.num.partitions=4",
            f"transaction.state.log.replication.factor={replicas}",
            f"transaction.state.log.min.isr={insync}",
            # a group's first join would wait 3 s for more members: a step's consumers
            # all join at their start, and the plugin waits for its assignment anyway
            "group.initial.rebalance.delay.ms=0",
            "num.partitions=1",
            # 1 MiB bodies plus record overhead (the default max is 1 MiB of batch)
            "message.max.bytes=8388608",
            "replica.fetch.max.bytes=8388608",
            "",
        ]
    )


def fresh_data(data: Path) -> None:
    """An empty data directory at ``data``, marked as mqlab's: one an earlier start made
    (its mark inside) is wiped, anything else there is kept and refused."""
    if data.is_symlink() or (data.exists() and not (data / DATA_MARK).is_file()):
        raise BrokerRefused(
            f"Kafka: {data} exists and is not a data directory mqlab made; mqlab leaves it as "
            "it is: give another --state-dir, or move it away"
        )
    if data.exists():  # an earlier run's: each run starts empty
        shutil.rmtree(data)
    data.mkdir()
    (data / DATA_MARK).write_text("made by mqlab's managed Kafka: wiped at its next start\n")


def cause(text: str) -> str:
    """Why the broker or the tool stopped, in Kafka's words: its first exception's message,
    else its first ERROR line, else its last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in lines:
        found = _CAUSE.search(line)
        if found:
            return found.group(1)[:300]
    errors = [ln for ln in lines if " ERROR " in ln or " FATAL " in ln]
    picked = errors[0] if errors else (lines[-1] if lines else "")
    return picked[:300]


class KafkaServer(ChildServers):
    """Private single-node Kafka brokers (KRaft), as :mod:`mqlab.servers.managed` starts them."""

    kind = "kafka"
    label = "Kafka"

    def installed(self) -> str | None:
        if shutil.which("java") is None:
            return (
                "Kafka needs Java, and there is none on PATH: "
                "sudo apt-get install default-jre-headless"
            )
        return None

    def _java(self) -> str:
        java = shutil.which("java")
        if java is None:
            raise BrokerError(self.installed() or "no Java")
        return java

    def start(self, state_dir: Path, nodes: int = 1) -> ServerHandle:
        """One node (:mod:`mqlab.servers.kafkaha` starts a replicated cluster)."""
        java = self._java()
        try:
            JARS.fetch()
        except (OSError, ValueError) as exc:
            raise BrokerError(f"Kafka {VERSION}: its jars could not be fetched: {exc}") from None
        state_dir.mkdir(parents=True, exist_ok=True)
        fresh_data(state_dir / "data")
        port, controller = free_port(), free_port()
        conf = state_dir / "server.properties"
        conf.write_text(properties(state_dir, port, controller))
        (state_dir / "log4j.properties").write_text(LOG4J)
        (state_dir / "tools-log4j.properties").write_text(TOOL_LOG4J)
        with self._starting():  # Ctrl-C or SIGTERM from here on leaves no JVM behind
            self._format(java, conf, state_dir)
            logging = f"-Dlog4j.configuration=file:{state_dir / 'log4j.properties'}"
            log_path = state_dir / "server.log"
            start = log_path.stat().st_size if log_path.exists() else 0  # this start's lines
            argv = [java, *JVM, logging, "-cp", JARS.classpath(), "kafka.Kafka", str(conf)]
            proc = self._spawn(argv, state_dir, log_path)
            self._wait_ready(proc, log_path, start, port)
        facts = {"product": "Kafka", "version": VERSION, "port": port, "mode": "KRaft"}
        return ServerHandle(
            self.kind,
            f"Kafka {VERSION} broker on 127.0.0.1:{port} (KRaft)",
            (f"kafka://127.0.0.1:{port}",),
            (proc.pid,),
            state_dir,
            facts,
        )

    def _format(self, java: str, conf: Path, state_dir: Path, cid: str = "") -> None:
        """Format the data directory ``conf`` names (``cid``: a cluster's shared id)."""
        out = state_dir / "format.log"
        logging = f"-Dlog4j.configuration=file:{state_dir / 'tools-log4j.properties'}"
        argv = [java, *TOOL_JVM, logging, "-cp", JARS.classpath(), "kafka.tools.StorageTool"]
        argv += ["format", "-t", cid or cluster_id(), "-c", str(conf)]
        try:
            with out.open("wb") as sink:
                done = subprocess.run(
                    argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                    timeout=FORMAT_WITHIN, check=False,
                )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise BrokerError(
                f"Kafka: kafka-storage format did not finish within {FORMAT_WITHIN:g}s (log {out})"
            ) from None
        if done.returncode != 0:
            raise BrokerError(
                f"Kafka: kafka-storage format refused the data directory {state_dir / 'data'}: "
                f"{cause(out.read_text(errors='replace')) or f'exit {done.returncode}'} (log {out})"
            )

    def _wait_ready(self, proc: subprocess.Popen[bytes], log: Path, start: int, port: int) -> None:
        deadline = time.monotonic() + READY_WITHIN
        while True:
            exited = proc.poll() is not None
            with log.open("rb") as f:
                f.seek(start)  # this start's lines, not an earlier run's in the same state dir
                text = f.read().decode(errors="replace")
            if READY_LINE in text:
                return
            if exited or time.monotonic() > deadline:
                # what the broker said before it stopped, before terminate() adds more
                why = cause(text) if exited else f"not ready within {READY_WITHIN:g}s"
                self._terminate(proc)
                raise BrokerError(
                    f"the private Kafka broker did not start on port {port}: {why} (log {log})"
                )
            time.sleep(0.1)


if __name__ == "__main__":  # scripts/setup.sh: fetch once, where Java is
    try:
        JARS.fetch(lambda line: print(line, file=sys.stderr))
    except (OSError, ValueError) as exc:
        print(f"mqlab.servers.kafka: {exc}", file=sys.stderr)
        sys.exit(1)
    print(f"Kafka {VERSION}: {JARS.cache_dir}")
