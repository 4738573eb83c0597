"""Managed servers started from Debian's binaries: NATS, Redis and Mosquitto.

Each runs as a child process of mqlab on free loopback ports, with every file
it writes (config, data, log) in its own state dir, and is stopped by its PID:
nothing here relies on, or disturbs, the system service Debian may have
started on the default port. A missing binary is one line naming the package.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from mqlab.errors import BrokerError
from mqlab.rabbitmq.host import deferred_signals
from mqlab.sdk.server import Launch, free_port
from mqlab.servers.handle import ServerHandle
from mqlab.servers.nodes import ProcessNodes

#: Launch and free_port are the SDK's (a plugin's own server uses them too)
__all__ = [
    "ChildServers", "Daemon", "Launch", "Mosquitto", "NatsServer", "RedisServer", "free_port",
    "terminate",
]  # fmt: skip

#: seconds a server may take to accept connections, then to exit on SIGTERM
READY_WITHIN = 15.0
STOP_WITHIN = 10.0


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


class ChildServers:
    """Servers mqlab started as its own child processes: kept by PID, stopped by PID (SIGTERM,
    then SIGKILL), so no zombie and no stray server outlives a run."""

    kind = ""  # the Features.server name
    label = ""  # for progress lines

    def __init__(self) -> None:
        # our children, by pid, so stop() can reap them (no zombie, no stray server)
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        #: a handle's first pid -> the pid of the process that replaced it (a restart)
        self._now: dict[int, int] = {}
        #: a replicated server's nodes by its state dir: a node a fault event restarted
        #: runs as a new child, which stop() ends too
        self.nodes: dict[Path, ProcessNodes] = {}

    def stop(self, handle: ServerHandle) -> None:
        nodes = self.nodes.pop(handle.state_dir, None)
        if nodes is not None:
            nodes.stop_all()
        for first in handle.pids:
            pid = self._now.pop(first, first)
            proc = self._children.pop(pid, None)
            if proc is not None and not self._terminate(proc):
                raise BrokerError(f"{self.label} (pid {pid}) did not exit after SIGKILL")

    @contextlib.contextmanager
    def _starting(self) -> Iterator[None]:
        """One start: every child spawned inside is stopped unless the block finishes,
        whatever ends it (a failure, Ctrl-C, SIGTERM): no server outlives a start that
        did not hand it over. The stopping itself is not cut short by another Ctrl-C."""
        before = set(self._children)
        try:
            yield
        except BaseException:
            with deferred_signals():
                for pid in set(self._children) - before:
                    self._terminate(self._children[pid])
            raise

    def _spawn(self, argv: Sequence[str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
        """Start one server as our child, its output appended to ``log``."""
        # a signal between the child's birth and its record would leave it unknown to stop()
        with log.open("ab") as out, deferred_signals():
            proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C to mqlab must not kill it mid-run
            )
            self._children[proc.pid] = proc
        return proc

    def _terminate(self, proc: subprocess.Popen[bytes]) -> bool:
        if not terminate(proc):
            return False
        self._children.pop(proc.pid, None)
        return True

    def probe(self, url: str) -> tuple[dict[str, Any] | None, int | None]:
        # a server mqlab did not start: say what it is meant to be, no CPU sampling
        return {"product": self.label}, None


class Daemon(ChildServers):
    """Starts one Debian binary as a child process; subclasses say how to run it."""

    binary = ""  # the executable's path
    package = ""  # the Debian package that ships it
    version_argv: tuple[str, ...] = ("--version",)
    ready_within = READY_WITHIN  # a JVM-based server needs longer

    def __init__(self) -> None:
        super().__init__()
        self._launched: dict[int, Launch] = {}  # by a handle's first pid

    def _ready(self, proc: subprocess.Popen[bytes], port: int, state_dir: Path) -> None:
        deadline = time.monotonic() + self.ready_within
        while not _accepts(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                self._terminate(proc)
                tail = _tail(state_dir / "server.log")
                raise BrokerError(
                    f"the private {self.label} server did not start on port {port}"
                    f" (log {state_dir / 'server.log'}){': ' + tail if tail else ''}"
                )
            time.sleep(0.05)

    def restart(self, handle: ServerHandle, hard: bool = False) -> None:
        """The server of ``handle`` stopped (SIGTERM, or SIGKILL when ``hard``: a crash) and
        started again with the same command line: its port and state dir, its data if it
        keeps any. :meth:`stop` stops the new process."""
        first = handle.pids[0]
        proc = self._children.pop(self._now.get(first, first))
        if hard:
            proc.kill()
            proc.wait(STOP_WITHIN)
        elif not terminate(proc):
            raise BrokerError(f"{self.label} (pid {proc.pid}) did not exit after SIGKILL")
        how = self._launched[first]
        with self._starting():
            again = self._spawn(how.argv, handle.state_dir, handle.state_dir / "server.log")
            self._now[first] = again.pid
            self._ready(again, how.port, handle.state_dir)

    def installed(self) -> str | None:
        if shutil.which(self.binary) or os.access(self.binary, os.X_OK):
            return None
        return (
            f"{self.label} is not installed ({self.binary} not found): "
            f"sudo apt-get install {self.package}"
        )

    def launch(self, state_dir: Path) -> Launch:
        raise NotImplementedError

    def version(self) -> str | None:
        try:
            out = subprocess.run(
                [self.binary, *self.version_argv], capture_output=True, text=True, timeout=5
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        found = re.search(r"v?=?(\d+\.\d+(?:\.\d+)?)", out.stdout + out.stderr)
        return found.group(1) if found else None

    def start(self, state_dir: Path, nodes: int = 1) -> ServerHandle:
        """One node whatever ``nodes`` says: mqlab clusters RabbitMQ only (said in the label)."""
        state_dir.mkdir(parents=True, exist_ok=True)
        how = self.launch(state_dir)
        with self._starting():
            proc = self._spawn(how.argv, state_dir, state_dir / "server.log")
            self._launched[proc.pid] = how
            self._ready(proc, how.port, state_dir)
        facts = {"product": self.label, "version": self.version() or "?", "port": how.port}
        single = "" if nodes == 1 else " (one node: mqlab clusters RabbitMQ only)"
        return ServerHandle(
            self.kind,
            f"{self.label} server on 127.0.0.1:{how.port}{single}",
            (how.url,),
            (proc.pid,),
            state_dir,
            facts,
        )


def terminate(proc: subprocess.Popen[Any]) -> bool:
    """SIGTERM, then SIGKILL after STOP_WITHIN; True once it has exited."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_WITHIN)
        except subprocess.TimeoutExpired:
            proc.kill()
            try:
                proc.wait(STOP_WITHIN)
            except subprocess.TimeoutExpired:
                return False
    return True


def _tail(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


class NatsServer(Daemon):
    """nats-server with JetStream (its store in the state dir) and 8 MB payloads."""

    kind, label, binary, package = "nats", "NATS", "/usr/sbin/nats-server", "nats-server"

    def launch(self, state_dir: Path) -> Launch:
        port, http = free_port(), free_port()
        # the default max_payload (1 MB) would refuse the kit's 1 MiB bodies plus framing
        conf = state_dir / "nats.conf"
        conf.write_text(
            f'listen: "127.0.0.1:{port}"\nhttp: "127.0.0.1:{http}"\nmax_payload: 8MB\n'
            f'jetstream {{ store_dir: "{state_dir / "jetstream"}" }}\n'
        )
        return Launch([self.binary, "-c", str(conf)], port, f"nats://127.0.0.1:{port}")

    def start(self, state_dir: Path, nodes: int = 1) -> ServerHandle:
        handle = super().start(state_dir, nodes)
        http = re.search(r'http: "127\.0\.0\.1:(\d+)"', (state_dir / "nats.conf").read_text())
        monitor = f"http://127.0.0.1:{http.group(1)}" if http else None
        return ServerHandle(
            handle.kind, handle.label, handle.urls, handle.pids, handle.state_dir,
            {**handle.facts, "monitor": monitor}, None,
        )  # fmt: skip


class RedisServer(Daemon):
    """redis-server without persistence: the run's streams live in memory only."""

    kind, label, binary, package = "redis", "Redis", "/usr/bin/redis-server", "redis-server"

    def launch(self, state_dir: Path) -> Launch:
        port = free_port()
        argv = [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(state_dir)]
        argv += ["--save", "", "--appendonly", "no", "--protected-mode", "yes"]
        return Launch(argv, port, f"redis://127.0.0.1:{port}/0")


class Mosquitto(Daemon):
    """mosquitto (MQTT 3.1.1 and 5) on one loopback listener, anonymous clients allowed,
    without persistence: sessions and queued messages live in memory only."""

    kind, label, binary, package = "mosquitto", "Mosquitto", "/usr/sbin/mosquitto", "mosquitto"
    version_argv = ("-h",)

    def launch(self, state_dir: Path) -> Launch:
        port = free_port()
        conf = state_dir / "mosquitto.conf"
        # No persistence, as for Redis: mqlab never restarts a managed mosquitto within a
        # run, so its file could only be read by the next run in the same state dir, which
        # would get the sessions and queued messages of this one (same client ids); nor
        # does a long run pause for a snapshot every autosave_interval (30 min). Started
        # as root, mosquitto also runs as the user "mosquitto", which cannot write a state
        # dir root made: it logged "Error saving in-memory database" at every stop.
        conf.write_text(
            f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
            "max_queued_messages 0\n"
            # Nagle's algorithm with delayed ACKs adds ~40 ms to every small reply
            "set_tcp_nodelay true\n"
        )
        return Launch([self.binary, "-c", str(conf)], port, f"mqtt://127.0.0.1:{port}")
