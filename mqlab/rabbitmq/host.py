"""This machine's side of a private node: processes by PID, loopback ports, epmd.

Everything here works on PIDs and port numbers, never on process names, so a
system RabbitMQ or another user's node is never signalled by mistake.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import psutil

from mqlab.errors import BrokerError

# ---------------------------------------------------------------------------
# processes

_STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """Ctrl-C, SIGTERM, SIGHUP and SIGQUIT held until the block ends, then delivered."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # Handlers, not a signal mask: a mask holds the signal for this thread only, and the
    # kernel hands a process-directed signal to any other thread that does not block it
    # (a library's I/O thread), whose Python handler then interrupts this one anyway.
    held: list[int] = []
    old = {s: signal.getsignal(s) for s in _STOPS}
    for s in _STOPS:
        signal.signal(s, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
        if held:
            signal.raise_signal(held[0])  # once, as the user meant it


def pid_running(pid: int) -> bool:
    """True while the process exists and has not exited (a zombie has exited)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # exists, but we may not look at it


def create_time(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def same_process(pid: int, created: float) -> bool:
    """True if ``pid`` still runs and is the process started at ``created`` (not a reused pid)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return bool(abs(proc.create_time() - created) < 1.0)
    except psutil.Error:
        return False


def children(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while pid_running(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def terminate(pid: int, grace: float) -> None:
    """SIGTERM (RabbitMQ shuts down cleanly on it), then SIGKILL after ``grace`` seconds;
    then the VM's helpers (erl_child_setup, inet_gethost), which a SIGKILLed VM can strand."""
    helpers = children(pid)
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        except PermissionError as exc:
            raise BrokerError(f"not allowed to signal broker pid {pid}: {exc}") from exc
        if wait_gone(pid, wait):
            break
    reap_helpers(helpers)


def reap_helpers(helpers: list[psutil.Process]) -> None:
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


# ---------------------------------------------------------------------------
# ports


def port_free(port: int) -> bool:
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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pick_port(preferred: int, avoid: set[int]) -> int:
    """``preferred`` if it is free and not in ``avoid``, else any free port not in ``avoid``."""
    if preferred < 65536 and preferred not in avoid and port_free(preferred):
        return preferred
    while True:
        port = free_port()
        if port not in avoid:
            return port


def taken_message(port: int) -> str:
    pid = find_pid(port)
    who = ""
    if pid is not None:
        with contextlib.suppress(psutil.Error):
            who = f"; pid {pid} {psutil.Process(pid).name()} listens there"
    return f"port {port} is taken by another process (choose --port{who})"


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


def _reaches_loopback(ip: str) -> bool:
    return ip in ("0.0.0.0", "::", "::1", "::ffff:127.0.0.1") or ip.startswith("127.")


# ---------------------------------------------------------------------------
# epmd: the Erlang port mapper every node on the host registers with


def epmd_port() -> int:
    try:
        return int(os.environ.get("ERL_EPMD_PORT", "4369"))
    except ValueError:
        return 4369


def epmd_running(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def epmd_kill(port: int) -> None:
    """Ask epmd to exit; it refuses (and we accept that) while any node is registered."""
    epmd = shutil.which("epmd")
    if epmd is None or not epmd_running(port):
        return
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            [epmd, "-port", str(port), "-kill"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=5,
        )
