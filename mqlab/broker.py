"""A private local RabbitMQ node that mqlab starts, inspects and stops.

The node is fully isolated from any system broker: its own node name
(``mqlab-<port>@localhost``), its own loopback ports (AMQP, management, Erlang
distribution), its own data, logs, config and Erlang cookie, all under
``<state_dir>/<node name>/``. A small JSON record there (``node.json``) lets a
later process (``mqlab broker status`` / ``stop``) find the node again.

Layout of one node directory::

    <state_dir>/mqlab-5673@localhost/
        node.json          the record status()/stop() read
        rabbitmq.conf      listeners on 127.0.0.1 only, guest allowed over loopback
        enabled_plugins    rabbitmq_management, rabbitmq_amqp1_0
        rabbitmq-env.conf  empty: keeps the system's /etc/rabbitmq settings out
        .erlang.cookie     shared by the node and the rabbitmqctl calls (HOME is this dir)
        console.log        the node's stdout: boot failures that happen before logging is up
        log/               the node's own log files
        mnesia/            data; wiped at every start so each run begins on a clean broker

We call the real scripts in ``/usr/lib/rabbitmq/bin`` rather than the Debian
wrappers in ``/usr/sbin``, which ``su rabbitmq`` when run as root and would put
the node out of our reach.

epmd (the Erlang port mapper, port 4369) is shared by every Erlang node on the
host. If it was already running when we started, it belongs to someone else and
we never touch it. If our node started it, stop() runs ``epmd -kill`` afterwards;
epmd itself refuses that while any node is still registered, so an epmd that
other nodes use is never killed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from base64 import b64encode
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from mqlab.errors import BrokerError

__all__ = [
    "BrokerNode",
    "default_state_dir",
    "find_pid",
    "installed",
    "server_version",
    "start",
    "status",
    "stop",
]

_SBIN_CANDIDATES = (
    Path("/usr/lib/rabbitmq/bin"),  # Debian, Ubuntu, RPM packages
    Path("/opt/homebrew/sbin"),  # Homebrew on Apple silicon
    Path("/usr/local/sbin"),  # Homebrew on Intel, generic-unix tarballs installed by hand
)
_INSTALL_HINT = (
    "RabbitMQ is not installed: run `apt-get install rabbitmq-server` (Debian/Ubuntu) or see README"
)
_RECORD = "node.json"
_LOCK = ".lock"
_PLUGINS = "[rabbitmq_management,rabbitmq_amqp1_0].\n"
_LOG_TAIL_LINES = 20
# The prefix of a RabbitMQ log line: "2026-11-22 06:17:51.272014+00:00 [error] <0.132.0> ".
_TIMESTAMPED = re.compile(r"^\d{4}-\d\d-\d\d[ T][\d:.]+\S* \[\w+\] <[\d.]+> ?")
# Seconds between readiness probes: a boot takes 5-10 s, so a finer grain buys nothing.
_POLL = 0.3


@dataclass(frozen=True)
class BrokerNode:
    """One private RabbitMQ node started by :func:`start` (guest/guest, loopback only)."""

    name: str  # node name, e.g. "mqlab-5673@localhost"
    url: str  # "amqp://guest:guest@127.0.0.1:5673/"
    management_url: str  # "http://127.0.0.1:15673"
    port: int
    management_port: int
    dist_port: int
    pid: int  # the beam.smp OS pid (for CPU sampling with psutil)
    state_dir: Path  # the state dir given to start(); pass it to status()/stop()
    version: str  # "3.10.8"

    @property
    def node_dir(self) -> Path:
        """The node's own directory: config, cookie, data and logs."""
        return self.state_dir / self.name

    @property
    def log_file(self) -> Path:
        """The node's main log file."""
        return self.node_dir / "log" / f"{self.name}.log"


@dataclass(frozen=True)
class _Record:
    """What node.json holds: the node plus what is needed to recognise and clean it up."""

    node: BrokerNode
    create_time: float  # the beam's start time: tells our beam from a reused pid
    epmd_port: int  # the epmd the node registered with (ERL_EPMD_PORT at start)
    epmd_started: bool  # True if epmd was not running before this node started it

    def to_json(self) -> str:
        data: dict[str, Any] = asdict(self.node)
        data["state_dir"] = str(self.node.state_dir)
        data["create_time"] = self.create_time
        data["epmd_port"] = self.epmd_port
        data["epmd_started"] = self.epmd_started
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def load(cls, path: Path, state_dir: Path) -> _Record:
        try:
            data = json.loads(path.read_text())
            node = BrokerNode(
                name=str(data["name"]),
                url=str(data["url"]),
                management_url=str(data["management_url"]),
                port=int(data["port"]),
                management_port=int(data["management_port"]),
                dist_port=int(data["dist_port"]),
                pid=int(data["pid"]),
                state_dir=state_dir,
                version=str(data["version"]),
            )
            return cls(
                node,
                float(data["create_time"]),
                int(data["epmd_port"]),
                bool(data["epmd_started"]),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BrokerError(
                f"cannot read broker record {path}: {exc} (stop the node by hand, then delete it)"
            ) from exc


# ---------------------------------------------------------------------------
# public API


def default_state_dir() -> Path:
    """Where mqlab keeps its private brokers: ``$MQLAB_STATE_DIR``, else ``$XDG_STATE_HOME/mqlab``,
    else ``~/.local/state/mqlab``."""
    explicit = os.environ.get("MQLAB_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    # The XDG spec says relative values are invalid and must be ignored.
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "mqlab"
    return Path.home() / ".local" / "state" / "mqlab"


def installed() -> str | None:
    """None if RabbitMQ (and Erlang) can be run here, else one line saying what to install."""
    if _sbin() is None or shutil.which("erl") is None:
        return _INSTALL_HINT
    return None


def start(
    state_dir: Path | None = None,
    port: int | None = None,
    nodes: int = 1,
    timeout: float = 60,
) -> BrokerNode:
    """Start a private RabbitMQ node and return once it accepts AMQP and management requests.

    ``port`` None picks a free loopback port; the management and distribution ports
    are ``port + 10000`` and ``port + 20000`` when free (RabbitMQ's own convention),
    else any free port. Each start begins with empty data. Raises
    :class:`~mqlab.errors.BrokerError` if a node recorded in ``state_dir`` still
    runs, if ``port`` is taken, or if the node does not come up within ``timeout``
    seconds (then the message carries the last lines of the node's log and the
    node is killed: nothing is left running).
    """
    if nodes < 1:
        raise BrokerError(f"nodes must be at least 1, got {nodes}")
    if nodes > 1:
        raise BrokerError("multi-node clusters are not supported yet (start one node)")
    if port is not None and not 0 < port < 65536:
        raise BrokerError(f"port {port} is not a TCP port (choose --port between 1 and 65535)")
    problem = installed()
    if problem:
        raise BrokerError(problem)
    sbin = _sbin()
    assert sbin is not None  # installed() checked it
    state_dir = _resolve(state_dir)
    deadline = time.monotonic() + timeout
    with _locked(state_dir, timeout):
        for record in _records(state_dir):
            if _alive(record):
                raise BrokerError(
                    f"a broker is already running on port {record.node.port} (mqlab broker stop)"
                )
            # The node died without stop(): its record only misleads status().
            _record_path(record.node).unlink(missing_ok=True)
        if port is None:
            port = _free_port()
        elif not _port_free(port):
            raise BrokerError(_taken_message(port))
        management_port = _pick_port(port + 10000, avoid={port})
        dist_port = _pick_port(port + 20000, avoid={port, management_port})
        name = f"mqlab-{port}@localhost"
        node_dir = state_dir / name
        try:
            _prepare(node_dir, port, management_port)
        except OSError as exc:
            raise BrokerError(f"cannot prepare {node_dir}: {exc} (choose --state-dir)") from exc
        epmd_port = _epmd_port()
        epmd_was_running = _epmd_running(epmd_port)
        env = _node_env(node_dir, name, port, dist_port, epmd_port)
        pid = _launch(sbin, node_dir, env)
        node = BrokerNode(
            name=name,
            url=f"amqp://guest:guest@127.0.0.1:{port}/",
            management_url=f"http://127.0.0.1:{management_port}",
            port=port,
            management_port=management_port,
            dist_port=dist_port,
            pid=pid,
            state_dir=state_dir,
            version="",
        )
        try:
            create_time = _create_time(pid)
            if create_time is None:
                raise BrokerError(
                    f"RabbitMQ node {name} exited during start-up{_failure_details(node)}"
                )
            # Recorded before the node is up so that a start interrupted half-way
            # (Ctrl-C, a crash of mqlab) still leaves a node `mqlab broker stop` finds.
            _write_record(_Record(node, create_time, epmd_port, not epmd_was_running))
            version = _await_ready(sbin, node, env, deadline, timeout)
            node = replace(node, version=version)
            record = _Record(node, create_time, epmd_port, not epmd_was_running)
            _write_record(record)
        except BaseException:
            _terminate(pid, grace=5)
            _record_path(node).unlink(missing_ok=True)
            if not epmd_was_running:
                _epmd_kill(epmd_port)
            raise
        return node


def stop(state_dir: Path | None = None, timeout: float = 30) -> list[BrokerNode]:
    """Stop every node recorded in ``state_dir`` and return the ones that were running.

    Asks the node to stop (``rabbitmqctl stop``), then sends SIGTERM, then SIGKILL,
    and returns only once the node's processes are gone. Records of nodes that had
    already died are removed too. Raises :class:`~mqlab.errors.BrokerError` if a
    process survives SIGKILL.
    """
    state_dir = _resolve(state_dir)
    if not state_dir.is_dir():
        return []
    deadline = time.monotonic() + timeout
    stopped: list[BrokerNode] = []
    with _locked(state_dir, timeout):
        records = _records(state_dir)
        for record in records:
            if _alive(record):
                remaining = max(deadline - time.monotonic(), 3.0)
                _stop_node(record, remaining)
                stopped.append(record.node)
            _record_path(record.node).unlink(missing_ok=True)
        for epmd_port in sorted({r.epmd_port for r in records if r.epmd_started}):
            _epmd_kill(epmd_port)
    return stopped


def status(state_dir: Path | None = None) -> list[tuple[BrokerNode, bool]]:
    """The nodes recorded in ``state_dir`` and whether each one's process is alive.

    Raises :class:`~mqlab.errors.BrokerError` if a record cannot be read."""
    return [(r.node, _alive(r)) for r in _records(_resolve(state_dir))]


def server_version(
    management_url: str, user: str = "guest", password: str = "guest"
) -> tuple[str, str] | None:
    """(product, version) from the management API, e.g. ("RabbitMQ", "3.10.8"); None if
    the API does not answer."""
    request = urllib.request.Request(management_url.rstrip("/") + "/api/overview")
    token = b64encode(f"{user}:{password}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=3) as response:
            data = json.loads(response.read())
    except (OSError, ValueError):  # URLError, HTTPError and timeouts are OSErrors
        return None
    if not isinstance(data, dict):
        return None
    version = data.get("product_version") or data.get("rabbitmq_version")
    if not version:
        return None
    return str(data.get("product_name") or "RabbitMQ"), str(version)


def find_pid(port: int) -> int | None:
    """The PID of the process listening on ``127.0.0.1:port`` (directly or on a wildcard
    address); None if nothing listens there or the OS does not say (another user's process)."""
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for conn in connections:
        if conn.status != psutil.CONN_LISTEN or not conn.laddr or conn.laddr.port != port:
            continue
        if _reaches_loopback(conn.laddr.ip) and conn.pid is not None:
            return int(conn.pid)
    return None


# ---------------------------------------------------------------------------
# start-up


def _sbin() -> Path | None:
    """The directory holding the real (not su-wrapping) RabbitMQ scripts."""
    explicit = os.environ.get("MQLAB_RABBITMQ_SBIN")
    candidates = [Path(explicit)] if explicit else list(_SBIN_CANDIDATES)
    for directory in candidates:
        server, ctl = directory / "rabbitmq-server", directory / "rabbitmqctl"
        if os.access(server, os.X_OK) and os.access(ctl, os.X_OK):
            return directory
    return None


def _resolve(state_dir: Path | None) -> Path:
    return (state_dir if state_dir is not None else default_state_dir()).expanduser().absolute()


def _prepare(node_dir: Path, port: int, management_port: int) -> None:
    node_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("mnesia", "log"):
        shutil.rmtree(node_dir / stale, ignore_errors=True)
    for stale in ("erl_crash.dump", "pid"):
        (node_dir / stale).unlink(missing_ok=True)
    (node_dir / "rabbitmq.conf").write_text(
        f"listeners.tcp.default = 127.0.0.1:{port}\n"
        f"management.tcp.port = {management_port}\n"
        "management.tcp.ip = 127.0.0.1\n"
        # guest may log in over loopback only by default; ours listens on loopback only anyway.
        "loopback_users = none\n"
    )
    (node_dir / "enabled_plugins").write_text(_PLUGINS)
    # rabbitmq-env sources this file; an empty one keeps /etc/rabbitmq/rabbitmq-env.conf out.
    (node_dir / "rabbitmq-env.conf").write_text("")
    cookie = node_dir / ".erlang.cookie"
    if not cookie.exists():
        # Erlang refuses a cookie file others can read.
        fd = os.open(cookie, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(16).upper())


def _node_env(
    node_dir: Path, name: str, port: int, dist_port: int, epmd_port: int
) -> dict[str, str]:
    # A user's own RABBITMQ_*/ERL_* settings must not leak into our private node.
    # NOTIFY_SOCKET would make rabbitmq-server think it runs as a systemd service.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RABBITMQ_", "ERL_")) and k != "NOTIFY_SOCKET"
    }
    env.update(
        # Node and CLI must register with / look up the same epmd, also when stop()
        # runs in another shell than start().
        ERL_EPMD_PORT=str(epmd_port),
        HOME=str(node_dir),  # the Erlang cookie lives in $HOME; node and CLI share it
        RABBITMQ_NODENAME=name,
        RABBITMQ_NODE_PORT=str(port),
        RABBITMQ_DIST_PORT=str(dist_port),
        RABBITMQ_MNESIA_BASE=str(node_dir / "mnesia"),
        RABBITMQ_LOG_BASE=str(node_dir / "log"),
        RABBITMQ_ENABLED_PLUGINS_FILE=str(node_dir / "enabled_plugins"),
        RABBITMQ_CONFIG_FILE=str(node_dir / "rabbitmq"),  # without .conf, as RabbitMQ wants
        # Never created: keeps the system's /etc/rabbitmq/advanced.config out.
        RABBITMQ_ADVANCED_CONFIG_FILE=str(node_dir / "advanced.config"),
        RABBITMQ_CONF_ENV_FILE=str(node_dir / "rabbitmq-env.conf"),
        RABBITMQ_PID_FILE=str(node_dir / "pid"),
        # Makes rabbitmq-server exec the VM instead of keeping a shell proxy around it,
        # so the pid we launch IS the beam; -noinput restores what the flag removes.
        RABBITMQ_ALLOW_INPUT="1",
        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=(
            "-noinput -kernel inet_dist_use_interface {127,0,0,1}"
        ),
        ERL_CRASH_DUMP=str(node_dir / "erl_crash.dump"),
    )
    return env


def _launch(sbin: Path, node_dir: Path, env: dict[str, str]) -> int:
    """Start rabbitmq-server in the background, detached from us; return the beam's pid.

    Not ``-detached``: that sends the node's stdout to /dev/null, and the reason a
    node dies during boot (a taken distribution port, say) is only printed there.
    The shell backgrounds the server and exits, so the node is not our child and
    outlives the mqlab command that started it.
    """
    console = node_dir / "console.log"
    console.write_text("")
    script = '"$@" </dev/null >>"$MQLAB_CONSOLE" 2>&1 & echo $!'
    try:
        out = subprocess.run(
            ["sh", "-c", script, "sh", str(sbin / "rabbitmq-server")],
            env={**env, "MQLAB_CONSOLE": str(console)},
            cwd=node_dir,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
            start_new_session=True,
        ).stdout
        return int(out.strip())
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise BrokerError(f"cannot launch {sbin / 'rabbitmq-server'}: {exc}") from exc


def _await_ready(
    sbin: Path, node: BrokerNode, env: dict[str, str], deadline: float, timeout: float
) -> str:
    """Wait until the node has fully booted; return its version. Raises BrokerError."""
    pid_file = node.node_dir / "pid"
    booted = False
    while True:
        if not _pid_running(node.pid):
            raise BrokerError(
                f"RabbitMQ node {node.name} exited during start-up{_failure_details(node)}"
            )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BrokerError(
                f"RabbitMQ node {node.name} did not start within {timeout:g} s"
                f"{_failure_details(node)}"
            )
        # The pid file appears once the node's distribution is up; before that
        # rabbitmqctl fails at once, so polling it earlier only burns CPU.
        if not booted and pid_file.exists():
            wait = max(round(remaining), 1)
            booted = _ctl(sbin, node, env, ["await_startup", "--timeout", str(wait)], wait + 5)
        if booted:
            # The management listener can lag the core boot by a moment.
            version = server_version(node.management_url)
            if version is not None:
                return version[1]
        time.sleep(_POLL)


def _ctl(
    sbin: Path, node: BrokerNode, env: dict[str, str], args: list[str], timeout: float
) -> bool:
    """Run rabbitmqctl against the node; True if it succeeded within ``timeout`` seconds."""
    try:
        result = subprocess.run(
            [str(sbin / "rabbitmqctl"), "-n", node.name, *args],
            env=env,
            cwd=node.node_dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0


def _failure_details(node: BrokerNode) -> str:
    """What to append to "node X exited/did not start": the reason if RabbitMQ printed
    one, else the last lines of its log; then where the full logs are.

    Failures before logging is up (a taken distribution port, a bad config) are
    only on stdout, where RabbitMQ prints ``ERROR: <reason>`` under a BOOT FAILED
    banner (interleaved with the same text as log lines); later failures are in
    the node log.
    """
    console = [_TIMESTAMPED.sub("", ln) for ln in _lines(node.node_dir / "console.log")]
    where = f"(full log: {node.log_file}; stdout: {node.node_dir / 'console.log'})"
    if "BOOT FAILED" in console:
        after = console[console.index("BOOT FAILED") :]
        reasons = list(dict.fromkeys(ln[6:].strip() for ln in after if ln.startswith("ERROR:")))
        if reasons:
            return ": " + "\n".join(reasons) + "\n" + where
    lines = _lines(node.log_file) or console
    tail = "\n".join(f"  {ln}" for ln in lines[-_LOG_TAIL_LINES:]) or "  (no output)"
    return f"; last lines of its output:\n{tail}\n{where}"


def _lines(path: Path) -> list[str]:
    try:
        return [ln.rstrip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return []


# ---------------------------------------------------------------------------
# stopping


def _stop_node(record: _Record, timeout: float) -> None:
    """Stop one live node: politely, then by signal. Raises BrokerError if it survives."""
    node = record.node
    deadline = time.monotonic() + timeout
    helpers = _children(node.pid)
    sbin = _sbin()
    if sbin is not None:
        env = _node_env(node.node_dir, node.name, node.port, node.dist_port, record.epmd_port)
        budget = max(round(timeout * 0.6), 1)
        # `rabbitmqctl stop` returns when the node has agreed to halt, not when the
        # VM is gone; the wait covers the rest. --timeout bounds the operation, not
        # the CLI's own VM start-up, hence the margin.
        if _ctl(sbin, node, env, ["stop", "--timeout", str(budget)], budget + 5):
            _wait_gone(node.pid, min(deadline - time.monotonic(), 10.0))
    if _pid_running(node.pid):
        _terminate(node.pid, grace=max(deadline - time.monotonic(), 2.0))
    if _pid_running(node.pid):
        raise BrokerError(f"RabbitMQ node {node.name} (pid {node.pid}) survived SIGKILL")
    _reap_helpers(helpers)


def _terminate(pid: int, grace: float) -> None:
    """SIGTERM (RabbitMQ shuts down cleanly on it), then SIGKILL after ``grace`` seconds;
    then the VM's helpers (erl_child_setup, inet_gethost), which a SIGKILLed VM can strand."""
    helpers = _children(pid)
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        except PermissionError as exc:
            raise BrokerError(f"not allowed to signal broker pid {pid}: {exc}") from exc
        if _wait_gone(pid, wait):
            break
    _reap_helpers(helpers)


def _reap_helpers(helpers: list[psutil.Process]) -> None:
    """Give the VM's helper processes a moment to notice the VM is gone, then kill them."""
    running = [p for p in helpers if _still(p)]
    deadline = time.monotonic() + 2.0
    while running and time.monotonic() < deadline:
        time.sleep(0.05)
        running = [p for p in running if _still(p)]
    for proc in running:
        # psutil checks the pid still names the same process before signalling.
        with contextlib.suppress(psutil.Error):
            proc.kill()


def _still(proc: psutil.Process) -> bool:
    """True while this very process (not a later one with its pid) runs and is no zombie."""
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _pid_running(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _children(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


# ---------------------------------------------------------------------------
# processes, ports, epmd, records


def _pid_running(pid: int) -> bool:
    """True while the process exists and has not exited (a zombie has exited)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # exists, but we may not look at it


def _create_time(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def _alive(record: _Record) -> bool:
    """True if the recorded beam is still running (not some later process with its pid)."""
    try:
        proc = psutil.Process(record.node.pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return bool(abs(proc.create_time() - record.create_time) < 1.0)
    except psutil.Error:
        return False


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # RabbitMQ binds with SO_REUSEADDR too, so connections of a previous node
        # lingering in TIME_WAIT do not make the port look taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            if exc.errno == errno.EACCES:
                raise BrokerError(
                    f"port {port} needs privileges (choose --port above 1023)"
                ) from exc
            raise BrokerError(f"cannot check port {port}: {exc}") from exc
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pick_port(preferred: int, avoid: set[int]) -> int:
    if preferred < 65536 and preferred not in avoid and _port_free(preferred):
        return preferred
    while True:
        port = _free_port()
        if port not in avoid:
            return port


def _taken_message(port: int) -> str:
    pid = find_pid(port)
    who = ""
    if pid is not None:
        with contextlib.suppress(psutil.Error):
            who = f"; pid {pid} {psutil.Process(pid).name()} listens there"
    return f"port {port} is taken by another process (choose --port{who})"


def _reaches_loopback(ip: str) -> bool:
    return ip in ("0.0.0.0", "::", "::1", "::ffff:127.0.0.1") or ip.startswith("127.")


def _epmd_port() -> int:
    try:
        return int(os.environ.get("ERL_EPMD_PORT", "4369"))
    except ValueError:
        return 4369


def _epmd_running(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _epmd_kill(port: int) -> None:
    """Ask epmd to exit; it refuses (and we accept that) while any node is registered."""
    epmd = shutil.which("epmd")
    if epmd is None or not _epmd_running(port):
        return
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            [epmd, "-port", str(port), "-kill"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=5,
        )


def _record_path(node: BrokerNode) -> Path:
    return node.node_dir / _RECORD


def _records(state_dir: Path) -> list[_Record]:
    if not state_dir.is_dir():
        return []
    return [_Record.load(path, state_dir) for path in sorted(state_dir.glob(f"*/{_RECORD}"))]


def _write_record(record: _Record) -> None:
    path = _record_path(record.node)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(record.to_json())
    tmp.replace(path)  # atomic: status() never reads half a record


@contextlib.contextmanager
def _locked(state_dir: Path, timeout: float) -> Iterator[None]:
    """Serialise start/stop on one state dir across processes."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        lock = open(state_dir / _LOCK, "a")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise BrokerError(f"cannot use state dir {state_dir}: {exc} (choose --state-dir)") from exc
    deadline = time.monotonic() + timeout
    with lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise BrokerError(
                        f"another mqlab process is starting or stopping a broker in {state_dir} "
                        "(wait for it, then retry)"
                    ) from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
