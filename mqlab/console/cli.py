"""The ``mqlab`` command line.

Every expected failure ends as one readable line on stderr and a non-zero exit:
2 for bad input (profile, plugin, option), 1 for a run that could not go on
(broker down, a worker that would not start), 130 after Ctrl-C. Results
measured before a failure are always written.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from rich.table import Table
from rich.text import Text

from mqlab import __version__, redact, registry
from mqlab.config.plan import make_plan
from mqlab.config.profile import parse_duration
from mqlab.console import hosts, metrics
from mqlab.console.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    CliError,
    check,
    load,
)
from mqlab.console.run import cmd_ceiling, cmd_run, show_ceilings
from mqlab.errors import BrokerError, BrokerRefused, MqlabError, PluginError
from mqlab.report import commands as report
from mqlab.sdk.urls import mask
from mqlab.terminal import console as _console
from mqlab.terminal import printable
from mqlab.transport import PATTERNS

if TYPE_CHECKING:
    from mqlab.results.record import Run


class _Parser(argparse.ArgumentParser):
    """Bad command-line values end in one line, like every other refusal."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: mqlab's own parser: each subcommand's parser by name, as build_parser adds it
        self.commands: dict[str, argparse.ArgumentParser] = {}

    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix("mqlab").strip()  # "run", or "" for mqlab itself
        self.exit(
            EXIT_BAD_INPUT,
            f"mqlab: {where + ': ' if where else ''}{message} (see {self.prog} --help)\n",
        )


def _duration_arg(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {n}")
    return n


def cmd_validate(args: argparse.Namespace) -> int:
    profile = load(args.profile)
    check(profile)
    plan = make_plan(profile)
    print(
        f"{profile.path}: ok: {len(profile.drivers)} driver(s), {len(profile.scenarios)} "
        f"scenario(s), {len(plan.steps)} step(s), about {plan.eta() / 60:.1f} min"
    )
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    console = _console()
    table = Table(title="mqlab plugins (entry-point group mqlab.transports)", title_justify="left")
    for col in ("plugin", "package", "version", "wire", "features", "options"):
        table.add_column(col)
    for name, info in registry.discover().items():
        try:
            cls = registry.load(info).cls
        except PluginError as exc:
            table.add_row(name, info.package, info.version, "-", Text(str(exc), "red"), "")
            continue
        f = cls.features
        feats = ", ".join(
            [p for p in PATTERNS if p in cls.patterns()]
            + [k for k in ("at_most_once", "mandatory", "durable", "fanout") if getattr(f, k)]
            + [f"server: {f.server}" if f.server else "no server"]
        )
        opts = ", ".join(f"{k}={v.default!r}" for k, v in cls.option_specs.items())
        table.add_row(name, info.package, info.version, cls.wire, feats, opts)
    console.print(table)
    return 0


# -- a finished run ------------------------------------------------------------


def cmd_show(args: argparse.Namespace) -> int:
    from mqlab.results.read import ResultsError, load_run

    try:
        # a results file is user input too: checked field by field (mqlab.results.read), and
        # its text is shown, never interpreted
        run = load_run(args.results)
    except ResultsError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    return _show(args, run)


def _show(args: argparse.Namespace, run: Run) -> int:
    from mqlab.live import comparison, seedtables

    steps = list(run.steps)
    aggregates = list(run.aggregates)
    env = dict(run.environment)
    name = run.name
    status = f"{len(steps)} step(s), {run.status}"
    repeated = "across repeats: msg/s ± 95 % CI, latency from the merged histograms"
    ceilings = any(s.ceiling for s in steps)  # written by `mqlab ceiling`
    top_title = (
        "top throughput (each driver's best step per pattern, per topology and queue type "
        "when there were several: msg/s (load, scenario))"
    )
    times_title = "time in the window: real, and the processes' own user and sys seconds"
    (top_header, top), times = seedtables.top_table(steps), seedtables.times_rows(steps)
    if args.top:
        if args.markdown:
            from mqlab.live import markdown

            print(f"{markdown.text(name)}: {top_title}\n\n{seedtables.markdown(top_header, top)}")
        else:
            _console().print(seedtables.table(top_title, top_header, top))
        return 0
    if args.markdown:
        from mqlab.ceiling import hook
        from mqlab.live import markdown

        agg = (
            f"\n\n{repeated}\n\n{comparison.comparison_markdown(aggregates)}" if aggregates else ""
        )
        agg += f"\n\n{hook.markdown(steps)}" if ceilings else ""
        if times:
            agg += f"\n\n{times_title}\n\n{seedtables.markdown(seedtables.TIMES_HEADER, times)}"
        print(f"{markdown.text(name)}: {markdown.text(status)}\n\n"
              f"{comparison.comparison_markdown(steps)}{agg}\n\n"
              f"Measured with {markdown.text(comparison.environment_line(env))}.")  # fmt: skip
        return 0
    console = _console()
    console.print(f"{name}: {status}")
    if steps:
        console.print(comparison.comparison(steps))
    if ceilings:
        show_ceilings(console, steps)
    if times:
        console.print(seedtables.table(times_title, seedtables.TIMES_HEADER, times))
    if aggregates:
        console.print(comparison.comparison(aggregates, title=repeated))
    console.print(f"measured with {comparison.environment_line(env)}")
    return 0


# -- broker --------------------------------------------------------------------


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


# -- entry point ---------------------------------------------------------------


def _run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("profile", help="the profile (TOML), e.g. profiles/quickstart.toml")
    p.add_argument("--duration", type=_duration_arg, help="measurement window per step (e.g. 20s)")
    p.add_argument("--warmup", type=_duration_arg, help="warm-up per step, excluded from figures")
    p.add_argument("--output", "-o", help="results file (default results/<profile>-<UTC>.json)")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the final table")
    p.add_argument("--processes", type=_positive_int,
                   help="spread each step's clients over N worker processes")  # fmt: skip
    p.add_argument("--broker", metavar="URL",
                   help="use this broker (comma-separated URLs for a cluster) instead of the "
                   "profile's, and do not start a managed one")  # fmt: skip
    p.add_argument("--state-dir", help=argparse.SUPPRESS)
    metrics.add_arguments(p, _duration_arg)


def build_parser() -> _Parser:
    parser = _Parser(
        prog="mqlab",
        description=(
            "Compare messaging drivers side by side: every driver in a profile runs the same "
            "RPC call, RPC cast and notification workloads against the same broker; mqlab shows "
            "live tables and writes a results file (throughput, latency percentiles, sent / "
            "received / lost / duplicated counts, CPU)."
        ),
        epilog="Start with: mqlab run profiles/quickstart.toml (no broker needed).",
    )
    parser.add_argument("--version", action="version", version=f"mqlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        """Add the subcommand ``name``; its parser is kept in ``parser.commands``."""
        parser.commands[name] = p = sub.add_parser(name, **kwargs)
        return p

    p = command(
        "run", help="run a profile and write a results file",
        description="Run every step of a profile (driver x scenario x load level) in worker "
        "processes, show live tables, and write a results JSON file after every step. "
        "Ctrl-C stops after the current interval and keeps what was measured; a second "
        "Ctrl-C stops at once.",
    )  # fmt: skip
    _run_arguments(p)
    p.set_defaults(func=cmd_run)

    p = command(
        "ceiling", help="run a profile with each cast step beside its library's ceiling",
        description="Run a profile as `run` does; right after each plain cast step, on the same "
        "broker with the same message size and ack mode, run the plugin's reference loop (the "
        "thinnest use of its library) and, for RabbitMQ, RabbitMQ PerfTest (Java; fetched from "
        "Maven Central on first use), and show the plugin's rate as a percentage of each.",
    )  # fmt: skip
    _run_arguments(p)
    p.set_defaults(func=cmd_ceiling)

    p = command(
        "validate",
        help="check a profile without running it",
        description="Parse and check a profile: fields, plugins, options.",
    )
    p.add_argument("profile")
    p.set_defaults(func=cmd_validate)

    p = command("show", help="print a results file's comparison table again",
                description="Print the comparison table of a finished (or interrupted) "
                "run from its results file, with the environment it was measured in; "
                "--markdown prints a Markdown table for publishing; --top prints each "
                "driver's best msg/s per pattern, as seed 001's top-throughput table.")  # fmt: skip
    p.add_argument("results", help="a results JSON file written by mqlab run")
    p.add_argument("--markdown", action="store_true", help="print Markdown instead")
    p.add_argument(
        "--top", action="store_true", help="only the top throughput per driver and pattern"
    )
    p.set_defaults(func=cmd_show)
    report.add_commands(command)  # report, compare
    hosts.add_commands(command)  # hosts certs, hosts check

    p = command("plugins", help="list the transport plugins mqlab can find",
                description="List every plugin registered under the entry-point group "
                "mqlab.transports: package, version, wire family, features and options, "
                "or why it fails to load.")  # fmt: skip
    p.set_defaults(func=cmd_plugins)

    p = command(
        "broker", help="start, stop or inspect a private local RabbitMQ node or cluster",
        description="Private RabbitMQ nodes, each with its own name, ports and data directory "
        "(AMQP 1.0 and management plugins on), clustered when --nodes > 1, for clean, "
        "reproducible runs.",
    )  # fmt: skip
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--port", type=lambda text: metrics.port_arg(text, lowest=1),
                   help="AMQP port (default: a free one)")  # fmt: skip
    p.add_argument("--nodes", type=_positive_int, default=1,
                   help="cluster size, 1 to 5 nodes on this machine (default 1)")  # fmt: skip
    p.add_argument(
        "--state-dir", help="where the node keeps its data (default ~/.local/state/mqlab)"
    )
    p.set_defaults(func=cmd_broker)
    return parser


def _say_error(text: str) -> None:
    """The one line of a refusal or failure: scrubbed of secrets, control codes shown."""
    with contextlib.suppress(OSError):
        print(f"mqlab: {printable(redact.scrub(text))}", file=sys.stderr)


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM and SIGHUP clean up like Ctrl-C (`run` has its own)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    stops = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
    previous = {sig: signal.signal(sig, _terminated) for sig in stops}
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # name the command whose options they are not, as its own parser would
            parser.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
        redact.scrub_logs()
        code: int = args.func(args)
        return code
    except CliError as exc:
        _say_error(str(exc))
        return exc.code
    except MqlabError as exc:
        _say_error(str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt:
        _say_error("interrupted")
        return EXIT_INTERRUPTED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
