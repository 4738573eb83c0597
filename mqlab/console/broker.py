"""``mqlab broker start|stop|status``: a private local RabbitMQ node or cluster, by hand."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from mqlab.console import metrics
from mqlab.console.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, CliError
from mqlab.errors import BrokerError, BrokerRefused
from mqlab.sdk.urls import mask

__all__ = ["add_commands"]


def cmd_broker(args: argparse.Namespace) -> int:
    from mqlab import rabbitmq

    state = Path(args.state_dir) if args.state_dir else None
    try:
        if args.action == "start":
            problem = rabbitmq.installed()
            if problem:
                raise CliError(problem, EXIT_FAILED)
            t = time.monotonic()
            try:
                cluster = rabbitmq.start(state, port=args.port, nodes=args.nodes)
            except KeyboardInterrupt:
                # start() stops what it launched on any exception, a SIGTERM included (main)
                raise CliError(
                    "interrupted while the broker was starting; the nodes it was starting are "
                    "stopped (`mqlab broker status` shows what is left)", EXIT_INTERRUPTED,
                ) from None  # fmt: skip
            what = "node" if len(cluster.nodes) == 1 else f"{len(cluster.nodes)}-node cluster"
            print(
                f"RabbitMQ {cluster.version} {what} ready in {time.monotonic() - t:.1f}s; "
                "stop it with `mqlab broker stop`"
            )
            for i, node in enumerate(cluster.nodes, start=1):
                print(
                    f"  node{i} {node.name}: {mask(node.url)} (management "
                    f"{node.management_url}, metrics {node.prometheus_url or '-'}, "
                    f"distribution {node.dist_port}, pid {node.pid})"
                )
        elif args.action == "stop":
            stopped = rabbitmq.stop(state)
            print(
                "stopped " + ", ".join(n.name for n in stopped) if stopped else "no broker running"
            )
        else:
            members = rabbitmq.members(state)
            if not members:
                print("no broker recorded (start one with `mqlab broker start`)")
            for m in members:
                n = m.node
                print(f"node{m.index} {n.name}: {m.state}, {mask(n.url)}, management "
                      f"{n.management_port}, distribution {n.dist_port}, pid {n.pid}")  # fmt: skip
    except BrokerError as exc:
        code = EXIT_BAD_INPUT if isinstance(exc, BrokerRefused) else EXIT_FAILED
        raise CliError(str(exc), code) from None
    return 0


def add_commands(
    command: Callable[..., argparse.ArgumentParser], count: Callable[[str], int]
) -> None:
    p = command(
        "broker",
        help="start, stop or inspect a private local RabbitMQ node or cluster",
        description="A private RabbitMQ node (a cluster with --nodes) with its own name, ports "
        "and data directory, AMQP 1.0 and management plugins on, for runs against a broker of "
        "your own. A profile with [broker] managed = true needs none of this: mqlab run starts "
        "and stops its node itself.",
        example="mqlab broker start --nodes 3",
    )
    p.add_argument(
        "action",
        choices=("start", "stop", "status"),
        help="start: start the node(s) and print their URLs; stop: stop what start "
        "started; status: each recorded node and whether it runs",
    )
    p.add_argument(
        "--port",
        type=lambda text: metrics.port_arg(text, lowest=1),
        metavar="PORT",
        help="start: the first node's AMQP port, node i's is PORT + i - 1 (default: free ones)",
    )
    p.add_argument(
        "--nodes",
        type=count,
        default=1,
        metavar="N",
        help="start: the cluster's size, 1 to 5 nodes on this machine",
    )
    p.add_argument(
        "--state-dir",
        metavar="DIR",
        help="where the nodes keep their data and mqlab its record of them "
        "(default: $MQLAB_STATE_DIR, else $XDG_STATE_HOME/mqlab, else ~/.local/state/mqlab)",
    )
    p.set_defaults(func=cmd_broker)
