"""One private RabbitMQ node: its files, its environment, launch, readiness, stop.

A node is fully isolated from any system broker: its own node name
(``mqlab-<port>@localhost``), its own loopback ports (AMQP, management, Erlang
distribution), its own data, logs, config and Erlang cookie, all under
``<state_dir>/<node name>/``::

    <state_dir>/mqlab-5673@localhost/
        node.json          the record status()/stop() read (see state.py)
        rabbitmq.conf      listeners on 127.0.0.1 only, guest allowed, partition handling
        enabled_plugins    rabbitmq_management, rabbitmq_amqp1_0, rabbitmq_prometheus
        rabbitmq-env.conf  empty: keeps the system's /etc/rabbitmq settings out
        .erlang.cookie     shared by the cluster's nodes and rabbitmqctl (HOME is this dir)
        console.log        the node's stdout: boot failures that happen before logging is up
        log/               the node's own log files
        mnesia/            data; wiped at every start so each run begins on a clean broker

We call the real scripts in ``/usr/lib/rabbitmq/bin`` rather than the Debian
wrappers in ``/usr/sbin``, which ``su rabbitmq`` when run as root and would put
the node out of our reach.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from mqlab.errors import BrokerError
from mqlab.rabbitmq import host
from mqlab.rabbitmq.facts import server_version

_SBIN_CANDIDATES = (
    Path("/usr/lib/rabbitmq/bin"),  # Debian, Ubuntu, RPM packages
    Path("/opt/homebrew/sbin"),  # Homebrew on Apple silicon
    Path("/usr/local/sbin"),  # Homebrew on Intel, generic-unix tarballs installed by hand
)
_INSTALL_HINT = (
    "RabbitMQ is not installed: run `apt-get install rabbitmq-server` (Debian/Ubuntu) or see README"
)
# rabbitmq_prometheus: the node's own /metrics, beside mqlab's on one Grafana dashboard
_PLUGINS = "[rabbitmq_management,rabbitmq_amqp1_0,rabbitmq_prometheus].\n"
# The seed report's cluster (OpenStack's 3-node RabbitMQ) heals partitions itself.
PARTITION_HANDLING = "autoheal"
# The prefix of a RabbitMQ log line: "2026-11-22 06:17:51.272014+00:00 [error] <0.132.0> ".
_TIMESTAMPED = re.compile(r"^\d{4}-\d\d-\d\d[ T][\d:.]+\S* \[\w+\] <[\d.]+> ?")
_ERROR_LINE = re.compile(r"\[(error|critical|alert|emergency)\]")
# Seconds between readiness probes: a boot takes 5-10 s, so a finer grain buys nothing.
_POLL = 0.3


@dataclass(frozen=True)
class BrokerNode:
    """One private RabbitMQ node (guest/guest, loopback only)."""

    name: str  # node name, e.g. "mqlab-5673@localhost"
    url: str  # "amqp://guest:guest@127.0.0.1:5673/"
    management_url: str  # "http://127.0.0.1:15673"
    port: int
    management_port: int
    dist_port: int
    pid: int  # the beam.smp OS pid (for CPU sampling with psutil)
    state_dir: Path  # the state dir given to start(); pass it to status()/stop()
    version: str  # "3.10.8"; "" until the node has booted
    #: rabbitmq_prometheus's port (AMQP + 10020 when free, as 5672 -> 15692); 0: not listening
    prometheus_port: int = 0

    @property
    def prometheus_url(self) -> str | None:
        """The node's Prometheus endpoint (rabbitmq_prometheus), None when it has none."""
        return f"http://127.0.0.1:{self.prometheus_port}/metrics" if self.prometheus_port else None

    @property
    def node_dir(self) -> Path:
        """The node's own directory: config, cookie, data and logs."""
        return self.state_dir / self.name

    @property
    def log_file(self) -> Path:
        """The node's main log file."""
        return self.node_dir / "log" / f"{self.name}.log"


def installed() -> str | None:
    """None if RabbitMQ (and Erlang) can be run here, else one line saying what to install."""
    if sbin() is None or shutil.which("erl") is None:
        return _INSTALL_HINT
    return None


def sbin() -> Path | None:
    """The directory holding the real (not su-wrapping) RabbitMQ scripts."""
    explicit = os.environ.get("MQLAB_RABBITMQ_SBIN")
    candidates = [Path(explicit)] if explicit else list(_SBIN_CANDIDATES)
    for directory in candidates:
        server, ctl_ = directory / "rabbitmq-server", directory / "rabbitmqctl"
        if os.access(server, os.X_OK) and os.access(ctl_, os.X_OK):
            return directory
    return None


def prepare(node: BrokerNode, cookie: str) -> None:
    """Write the node's config and cookie and wipe what a previous run left. Raises OSError."""
    node_dir = node.node_dir
    node_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("mnesia", "log"):
        shutil.rmtree(node_dir / stale, ignore_errors=True)
    for stale in ("erl_crash.dump", "pid", ".erlang.cookie"):
        (node_dir / stale).unlink(missing_ok=True)
    parts = urlsplit(node.url)
    address = parts.hostname or "127.0.0.1"
    # on another host's address (a broker host), not guest: a user of its own whose
    # password only the run knows
    user = (
        f"default_user = {unquote(parts.username or '')}\n"
        f"default_pass = {unquote(parts.password or '')}\n"
        "default_user_tags.administrator = true\n"
        if parts.username and parts.username != "guest"
        else ""
    )
    (node_dir / "rabbitmq.conf").write_text(
        f"listeners.tcp.default = {address}:{node.port}\n"
        f"management.tcp.port = {node.management_port}\n"
        f"management.tcp.ip = {address}\n"
        f"{user}"
        f"prometheus.tcp.port = {node.prometheus_port or node.port + 10020}\n"
        "prometheus.tcp.ip = 127.0.0.1\n"
        # guest may log in over loopback only by default; ours listens on loopback only (or
        # has a user of its own, on a broker host)
        "loopback_users = none\n"
        f"cluster_partition_handling = {PARTITION_HANDLING}\n"
        # the management API's figures (a connection's flow state, alarms) every second,
        # not every 5 s: mqlab reads them on each step's one-second timeline
        "collect_statistics_interval = 1000\n"
    )
    (node_dir / "enabled_plugins").write_text(_PLUGINS)
    # rabbitmq-env sources this file; an empty one keeps /etc/rabbitmq/rabbitmq-env.conf out.
    (node_dir / "rabbitmq-env.conf").write_text("")
    # Erlang refuses a cookie file others can read; nodes of one cluster share the value.
    fd = os.open(node_dir / ".erlang.cookie", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "w") as f:
        f.write(cookie)


def node_env(node: BrokerNode, epmd_port: int) -> dict[str, str]:
    """The environment rabbitmq-server and rabbitmqctl run with for this node."""
    # A user's own RABBITMQ_*/ERL_* settings must not leak into our private node.
    # NOTIFY_SOCKET would make rabbitmq-server think it runs as a systemd service.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RABBITMQ_", "ERL_")) and k != "NOTIFY_SOCKET"
    }
    node_dir = node.node_dir
    env.update(
        # Node and CLI must register with / look up the same epmd, also when stop()
        # runs in another shell than start().
        ERL_EPMD_PORT=str(epmd_port),
        # an epmd our node starts listens on loopback only, as the node itself does (it
        # would tell anyone who asks which nodes run here and on which ports)
        ERL_EPMD_ADDRESS="127.0.0.1",
        HOME=str(node_dir),  # the Erlang cookie lives in $HOME; node and CLI share it
        RABBITMQ_NODENAME=node.name,
        RABBITMQ_NODE_PORT=str(node.port),
        RABBITMQ_DIST_PORT=str(node.dist_port),
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
        # rabbitmqctl is an Erlang node too: its distribution port on loopback as well
        RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
        ERL_CRASH_DUMP=str(node_dir / "erl_crash.dump"),
    )
    return env


def launch(sbin_dir: Path, node: BrokerNode, env: dict[str, str]) -> int:
    """Start rabbitmq-server in the background, detached from us; return the beam's pid.

    Not ``-detached``: that sends the node's stdout to /dev/null, and the reason a
    node dies during boot (a taken distribution port, say) is only printed there.
    The shell backgrounds the server and exits, so the node is not our child and
    outlives the mqlab command that started it.
    """
    console = node.node_dir / "console.log"
    console.write_text("")
    script = '"$@" </dev/null >>"$MQLAB_CONSOLE" 2>&1 & echo $!'
    try:
        out = subprocess.run(
            ["sh", "-c", script, "sh", str(sbin_dir / "rabbitmq-server")],
            env={**env, "MQLAB_CONSOLE": str(console)},
            cwd=node.node_dir,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
            start_new_session=True,
        ).stdout
        return int(out.strip())
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise BrokerError(f"cannot launch {sbin_dir / 'rabbitmq-server'}: {exc}") from exc


def await_ready(
    sbin_dir: Path,
    node: BrokerNode,
    env: dict[str, str],
    deadline: float,
    timeout: float,
    also: Sequence[BrokerNode] = (),
) -> str:
    """Wait until the node has fully booted and its management API answers; return its
    version. Raises BrokerError (one line naming the node) if it, or one of the nodes
    booting beside it (``also``), dies, or if ``deadline`` passes."""
    pid_file = node.node_dir / "pid"
    booted = False
    while True:
        for watched in (node, *also):
            if not host.pid_running(watched.pid):
                raise BrokerError(
                    f"RabbitMQ node {watched.name} exited during start-up{failure(watched)}"
                )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BrokerError(
                f"RabbitMQ node {node.name} did not start within {timeout:g} s{failure(node)}"
            )
        # The pid file appears once the node's distribution is up; before that
        # rabbitmqctl fails at once, so polling it earlier only burns CPU.
        if not booted and pid_file.exists():
            wait = max(round(remaining), 1)
            booted = ctl(sbin_dir, node, env, ["await_startup", "--timeout", str(wait)], wait + 5)[
                0
            ]
        if booted:
            # The management listener can lag the core boot by a moment.
            parts = urlsplit(node.url)
            version = server_version(
                node.management_url, unquote(parts.username or "guest"),
                unquote(parts.password or "guest"),
            )  # fmt: skip
            if version is not None:
                return version[1]
        time.sleep(_POLL)


def ctl(
    sbin_dir: Path, node: BrokerNode, env: dict[str, str], args: list[str], timeout: float
) -> tuple[bool, str]:
    """Run rabbitmqctl against the node: (succeeded within ``timeout`` s, its output)."""
    try:
        result = subprocess.run(
            [str(sbin_dir / "rabbitmqctl"), "-n", node.name, *args],
            env=env,
            cwd=node.node_dir,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return False, f"rabbitmqctl {args[0]} did not finish within {timeout:g} s"
    except (OSError, subprocess.SubprocessError) as exc:
        return False, str(exc)
    return result.returncode == 0, (result.stderr + "\n" + result.stdout).strip()


def failure(node: BrokerNode) -> str:
    """What to append to "node X exited/did not start": one line with the reason and
    where the full logs are.

    Failures before logging is up (a taken distribution port, a bad config) are
    only on stdout, where RabbitMQ prints ``ERROR: <reason>`` under a BOOT FAILED
    banner (interleaved with the same text as log lines); later failures are the
    log's last error line.
    """
    console = [_TIMESTAMPED.sub("", ln) for ln in _lines(node.node_dir / "console.log")]
    where = f" (full log: {node.log_file}; stdout: {node.node_dir / 'console.log'})"
    if "BOOT FAILED" in console:
        after = console[console.index("BOOT FAILED") :]
        reasons = list(dict.fromkeys(ln[6:].strip() for ln in after if ln.startswith("ERROR:")))
        if reasons:
            return ": " + "; ".join(reasons) + where
    log = _lines(node.log_file)
    errors = [ln for ln in log if _ERROR_LINE.search(ln)]
    last = (errors or log or console or ["(no output)"])[-1]
    return ": " + _TIMESTAMPED.sub("", last).strip() + where


def _lines(path: Path) -> list[str]:
    try:
        return [ln.rstrip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return []


def stop_node(node: BrokerNode, epmd_port: int, timeout: float) -> None:
    """Stop one live node: politely, then by signal. Raises BrokerError if it survives."""
    deadline = time.monotonic() + timeout
    helpers = host.children(node.pid)
    sbin_dir = sbin()
    if sbin_dir is not None:
        env = node_env(node, epmd_port)
        budget = max(round(timeout * 0.6), 1)
        # `rabbitmqctl stop` returns when the node has agreed to halt, not when the
        # VM is gone; the wait covers the rest. --timeout bounds the operation, not
        # the CLI's own VM start-up, hence the margin.
        if ctl(sbin_dir, node, env, ["stop", "--timeout", str(budget)], budget + 5)[0]:
            host.wait_gone(node.pid, min(deadline - time.monotonic(), 10.0))
    if host.pid_running(node.pid):
        host.terminate(node.pid, grace=max(deadline - time.monotonic(), 2.0))
    if host.pid_running(node.pid):
        raise BrokerError(f"RabbitMQ node {node.name} (pid {node.pid}) survived SIGKILL")
    host.reap_helpers(helpers)
