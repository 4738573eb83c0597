"""``mqlab run --metrics-port``: the Prometheus endpoint's options, start and lines.

The server starts before any broker does, so a taken port is one line and exit 2 with
nothing started and nothing measured; it says where it listens, beside each managed
RabbitMQ node's own endpoint, so one Prometheus can scrape both (a port the system chose,
``--metrics-port 0``, is said even with ``-q``), and the results' environment records it.
An endpoint option without a port (``--metrics-host``, ``--metrics-linger``) is refused.
"""

from __future__ import annotations

import argparse
import errno
import signal
import socket
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from mqlab.console.common import EXIT_BAD_INPUT, CliError
from mqlab.servers.handle import ServerHandle

if TYPE_CHECKING:
    from mqlab.live.exporter import MetricsServer

#: loopback unless told otherwise: the figures name hosts, drivers and the results file
DEFAULT_HOST = "127.0.0.1"


def port_arg(text: str, lowest: int = 0) -> int:
    """A TCP port from the command line (``lowest`` 0: the system picks a free one)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a TCP port number, got {text!r}") from None
    if not lowest <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port {lowest} to 65535, got {port}")
    return port


def add_arguments(p: argparse.ArgumentParser, duration: Callable[[str], float]) -> None:
    p.add_argument("--metrics-port", type=port_arg, metavar="PORT",
                   help="serve Prometheus metrics on this port while the run lasts "
                   "(0: a free one; default: [run] metrics_port, else none)")  # fmt: skip
    p.add_argument("--metrics-host", metavar="ADDRESS", default=None,
                   help=f"the address the metrics listen on (default: {DEFAULT_HOST}; "
                   "0.0.0.0 for every interface)")  # fmt: skip
    p.add_argument("--metrics-linger", type=duration, metavar="DURATION", default=None,
                   help="keep serving the final figures this long after the run, so a "
                   "Prometheus scraping every few seconds gets the last step (default: stop "
                   "at once)")  # fmt: skip


def start(
    args: argparse.Namespace, profile_port: int | None, run: str, results: str, steps: int
) -> MetricsServer | None:
    """The metrics server the command line or the profile asks for, or None. CliError if not."""
    port = args.metrics_port if args.metrics_port is not None else profile_port
    host = args.metrics_host or DEFAULT_HOST
    if port is None:
        # an option about the endpoint, with no endpoint asked for: refused, not ignored
        asked = {"--metrics-host": args.metrics_host, "--metrics-linger": args.metrics_linger}
        given = [option for option, value in asked.items() if value is not None]
        if given:
            raise CliError(
                f"{given[0]} needs a port: give --metrics-port (or [run] metrics_port)",
                EXIT_BAD_INPUT,
            )
        return None
    from mqlab.live.exporter import Exporter, serve  # prometheus_client: only when asked

    try:
        return serve(Exporter(run, results, steps), host, port)
    except socket.gaierror:
        raise CliError(
            f"metrics: {host!r} is not an address of this machine: give an IP address "
            f"with --metrics-host (default {DEFAULT_HOST})",
            EXIT_BAD_INPUT,
        ) from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            why = "is taken by another program"
        elif exc.errno == errno.EADDRNOTAVAIL:
            why = "is not an address of this machine"
        elif exc.errno == errno.EACCES:
            why = "needs privileges (ports below 1024)"
        else:
            why = f"cannot be opened ({exc.strerror or exc})"
        raise CliError(
            f"metrics: {host}:{port} {why}: choose another with --metrics-port "
            "(0 picks a free one)",
            EXIT_BAD_INPUT,
        ) from None


def chosen(args: argparse.Namespace, profile_port: int | None) -> bool:
    """Whether the system chose the port (0 asked for): only the run can tell where it is."""
    return (args.metrics_port if args.metrics_port is not None else profile_port) == 0


def recorded(server: MetricsServer | None) -> dict[str, object] | None:
    """What the results' environment keeps of the endpoint (``metrics``): where it was."""
    if server is None:
        return None
    return {"host": server.host, "port": server.port, "url": server.url}


def endpoints(server: MetricsServer, handles: Mapping[str, ServerHandle]) -> str:
    """One line: mqlab's endpoint and each managed broker node's own."""
    parts = [f"metrics: mqlab {server.url}"]
    for handle in handles.values():
        for node, url in handle.metrics_urls.items():
            parts.append(f"{handle.kind} {node} {url}")
    return ", ".join(parts)


def linger(server: MetricsServer, seconds: float | None, say: Callable[[str], None]) -> None:
    """Serve the final figures ``seconds`` longer; Ctrl-C ends the wait."""
    if not seconds or seconds <= 0:
        return
    say(f"metrics: serving the final figures for {seconds:g} s more at {server.url} (Ctrl-C stops)")
    done = threading.Event()
    # the run's event loop is closed: its signal handlers are gone with it
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, lambda *_: done.set()) for sig in stops}
    try:
        done.wait(seconds)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
