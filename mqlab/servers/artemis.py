"""Apache ActiveMQ Artemis, managed: an embedded broker from Maven Central's jars.

Artemis is the second AMQP 1.0 broker mqlab manages, beside RabbitMQ (it is
what Red Hat AMQ Broker ships). Nothing is downloaded from outside Maven
Central: :data:`JARS` is ``artemis-server`` and ``artemis-amqp-protocol`` with
every library they load, pinned as Maven resolved them, fetched and SHA-1
checked by :mod:`mqlab.maven` into
``$XDG_CACHE_HOME/mqlab/artemis-<version>`` (``~/.cache/...``, about 20 MB,
once). The broker runs as ``java -cp <jars> <Main>``, where Main is the
launcher Artemis ships in ``artemis-server`` for its container image: it reads
``<dir>/etc/broker.xml``, keeps its journal in ``<dir>/data`` and stops the
broker on SIGTERM. ``scripts/setup.sh`` runs ``python -m mqlab.servers.artemis``;
a run fetches on first use too.

Each start writes its own ``broker.xml``: one AMQP acceptor on a free loopback
port, persistence on (a durable message is written to the journal before the
broker accepts it, as RabbitMQ does), security off (any SASL login is taken,
as a fresh RabbitMQ takes guest), addresses and queues created on first use.
A broker that cannot start (no Java, jars it cannot fetch, the port taken, a
journal it cannot read) is one line naming Artemis and the cause.
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mqlab import maven
from mqlab.errors import BrokerError
from mqlab.rabbitmq.host import find_pid
from mqlab.sdk.urls import host_port
from mqlab.servers.daemons import Daemon, Launch, free_port
from mqlab.servers.handle import ServerHandle

VERSION = "2.55.0"
MAIN = "org.apache.activemq.artemis.core.server.embedded.Main"
#: the heap the Artemis distribution's artemis.profile gives a new broker
HEAP = "-Xmx2G"
#: the runtime classpath, as ``mvn dependency:list -DincludeScope=runtime`` resolved
#: ``artemis-server`` and ``artemis-amqp-protocol`` 2.55.0 plus ``slf4j-simple`` (the broker
#: logs through SLF4J: without a binding its errors would vanish); Netty's native epoll
#: transport for Linux x86-64 (elsewhere Netty uses NIO), not its macOS one
JARS = maven.JarSet(
    f"artemis-{VERSION}",
    maven.jars(
        [
            ("com.github.ben-manes.caffeine", "caffeine", "3.2.4"),
            ("com.hierynomus", "asn-one", "0.6.0"),
            ("com.nimbusds", "nimbus-jose-jwt", "10.9.1"),
            ("commons-beanutils", "commons-beanutils", "1.11.0"),
            ("commons-collections", "commons-collections", "3.2.2"),
            ("commons-io", "commons-io", "2.22.0"),
            ("commons-logging", "commons-logging", "1.3.5"),
            ("de.dentrassi.crypto", "pem-keystore", "3.0.0"),
            ("io.micrometer", "micrometer-commons", "1.17.0"),
            ("io.micrometer", "micrometer-core", "1.17.0"),
            ("io.micrometer", "micrometer-observation", "1.17.0"),
            ("io.netty", "netty-buffer", "4.1.135.Final"),
            ("io.netty", "netty-codec-haproxy", "4.1.135.Final"),
            ("io.netty", "netty-codec-http", "4.1.135.Final"),
            ("io.netty", "netty-codec-socks", "4.1.135.Final"),
            ("io.netty", "netty-codec", "4.1.135.Final"),
            ("io.netty", "netty-common", "4.1.135.Final"),
            ("io.netty", "netty-handler-proxy", "4.1.135.Final"),
            ("io.netty", "netty-handler", "4.1.135.Final"),
            ("io.netty", "netty-resolver", "4.1.135.Final"),
            ("io.netty", "netty-transport-classes-epoll", "4.1.135.Final"),
            ("io.netty", "netty-transport-classes-kqueue", "4.1.135.Final"),
            ("io.netty", "netty-transport-native-epoll", "4.1.135.Final", "linux-x86_64"),
            ("io.netty", "netty-transport-native-unix-common", "4.1.135.Final"),
            ("io.netty", "netty-transport", "4.1.135.Final"),
            ("jakarta.transaction", "jakarta.transaction-api", "1.3.3"),
            ("org.apache.activemq", "activemq-artemis-native", "2.0.0"),
            ("org.apache.artemis", "artemis-amqp-protocol", "2.55.0"),
            ("org.apache.artemis", "artemis-commons", "2.55.0"),
            ("org.apache.artemis", "artemis-core-client", "2.55.0"),
            ("org.apache.artemis", "artemis-jdbc-store", "2.55.0"),
            ("org.apache.artemis", "artemis-journal", "2.55.0"),
            ("org.apache.artemis", "artemis-lockmanager-api", "2.55.0"),
            ("org.apache.artemis", "artemis-selector", "2.55.0"),
            ("org.apache.artemis", "artemis-server", "2.55.0"),
            ("org.apache.commons", "commons-configuration2", "2.15.1"),
            ("org.apache.commons", "commons-dbcp2", "2.14.0"),
            ("org.apache.commons", "commons-lang3", "3.20.0"),
            ("org.apache.commons", "commons-pool2", "2.13.0"),
            ("org.apache.commons", "commons-text", "1.15.0"),
            ("org.apache.qpid", "proton-j", "0.34.1"),
            ("org.jctools", "jctools-core", "4.0.6"),
            ("org.jgroups", "jgroups", "5.3.13.Final"),
            ("org.jspecify", "jspecify", "1.0.0"),
            ("org.slf4j", "slf4j-api", "2.0.18"),
            ("org.slf4j", "slf4j-simple", "2.0.17"),
            ("org.snakeyaml", "snakeyaml-engine", "3.0.1"),
        ]
    ),
)

_BROKER_XML = """<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq">
  <core xmlns="urn:activemq:core">
    <name>mqlab</name>
    <persistence-enabled>true</persistence-enabled>
    <!-- libaio (ASYNCIO) is a native extra; NIO is what every machine has -->
    <journal-type>NIO</journal-type>
    <journal-pool-files>10</journal-pool-files>
    <security-enabled>false</security-enabled>
    <!-- the default (90 %) blocks every producer on a fuller disk: RabbitMQ's own
         disk alarm is an absolute free-space limit, so keep only that kind here -->
    <max-disk-usage>100</max-disk-usage>
    <min-disk-free>50M</min-disk-free>
    <acceptors>
      <acceptor name="amqp">tcp://127.0.0.1:{port}?protocols=AMQP;tcpNoDelay=true</acceptor>
    </acceptors>
    <address-settings>
      <address-setting match="#">
        <auto-create-addresses>true</auto-create-addresses>
        <auto-create-queues>true</auto-create-queues>
        <auto-delete-addresses>true</auto-delete-addresses>
        <auto-delete-queues>true</auto-delete-queues>
      </address-setting>
    </address-settings>
  </core>
</configuration>
"""

#: an exception line of a JVM's log (not an indented "Suppressed:" one) and its root cause
_THROWN = re.compile(r"^[\w.$]+(?:Exception|Error): (.+)")
_ROOT = re.compile(r"^Caused by: [\w.$]+: (.+)")
#: the log line Artemis writes once its acceptors listen
_ACTIVE = "AMQ221007"


def fetch(say: Callable[[str], None] = lambda _: None) -> None:
    """Download the jars still missing; BrokerError with one line when it cannot."""
    try:
        JARS.fetch(say)
    except (OSError, ValueError) as exc:
        raise BrokerError(f"Artemis' jars could not be fetched from Maven Central: {exc}") from None


def cause(log: Path) -> str:
    """Why a start failed, in one line: the JVM's first exception and its root cause."""
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    for i, line in enumerate(lines):
        thrown = _THROWN.match(line)
        if thrown:
            why = thrown.group(1).strip("[] ").removeprefix("errorType=IO_ERROR message=")
            roots = [m.group(1) for ln in lines[i + 1 :] if (m := _ROOT.match(ln))]
            if roots and roots[-1] not in why:
                why = f"{why} ({roots[-1]})"
            return why[:300]
    errors = [ln.split(" - ", 1)[-1] for ln in lines if " ERROR " in ln]
    return (errors[0] if errors else lines[-1] if lines else "").strip()[:300]


class Artemis(Daemon):
    """One embedded Artemis broker (AMQP 1.0 only) as a child JVM on a free loopback port."""

    kind, label, binary, package = "artemis", "Artemis", "java", "default-jre-headless"
    #: a cold JVM: about 2 s on a quiet two-core machine, many times that at a load of 20
    ready_within = 120.0

    def installed(self) -> str | None:
        if shutil.which("java") is None:
            return (
                "Artemis needs a Java runtime and there is none on PATH: "
                "sudo apt-get install default-jre-headless"
            )
        return None

    def version(self) -> str | None:
        return VERSION

    def launch(self, state_dir: Path) -> Launch:
        port = free_port()
        etc = state_dir / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "broker.xml").write_text(_BROKER_XML.format(port=port))
        argv = [self.binary, HEAP, "-XX:+UseG1GC"]
        # the audit log writes a line per management call: only its warnings
        argv.append("-Dorg.slf4j.simpleLogger.log.org.apache.activemq.audit=warn")
        argv += ["-cp", JARS.classpath(), MAIN, str(state_dir)]
        # security is off: the credentials are there for clients that always log in
        return Launch(argv, port, f"amqp://guest:guest@127.0.0.1:{port}")

    def start(self, state_dir: Path, nodes: int = 1) -> ServerHandle:
        problem = self.installed()
        if problem:
            raise BrokerError(problem)
        fetch()
        log = state_dir / "server.log"
        try:
            with self._starting():  # Ctrl-C or SIGTERM from here on leaves no JVM behind
                handle = super().start(state_dir, nodes)
                # the port may answer before Artemis is up, or be someone else's: only
                # Artemis saying it is active, from the process we started, counts
                self._await_active(handle.pids[0], log)
        except BrokerError as exc:
            why = cause(log) or str(exc)
            if "AMQ1490" in why:  # the journal's own errors: say where it is
                why = f"its journal in {state_dir / 'data'} cannot be read: {why}"
            raise BrokerError(
                f"the private Artemis broker did not start (log {log}): {why}"
            ) from None
        return handle

    def probe(self, url: str) -> tuple[dict[str, Any] | None, int | None]:
        """An Artemis mqlab did not start: its pid when it listens on this host (for CPU)."""
        host, port = host_port(url)
        local = host in ("127.0.0.1", "localhost", "::1")
        return {"product": self.label}, find_pid(port) if local else None

    def _await_active(self, pid: int, log: Path) -> None:
        proc = self._children[pid]
        deadline = time.monotonic() + self.ready_within
        while _ACTIVE not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                self._terminate(proc)
                raise BrokerError(f"exit status {proc.returncode}")
            time.sleep(0.05)


if __name__ == "__main__":  # scripts/setup.sh: fetch once
    try:
        fetch(lambda line: print(line, file=sys.stderr))
    except BrokerError as exc:
        print(f"mqlab.artemis: {exc}", file=sys.stderr)
        sys.exit(1)
