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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from mqlab import __version__, redact, registry
from mqlab.config.plan import make_plan
from mqlab.config.profile import parse_duration
from mqlab.console import broker, helptext, hosts, metrics, selftest, system
from mqlab.console.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    CliError,
    check,
    load,
)
from mqlab.console.run import cmd_ceiling, cmd_run, show_ceilings
from mqlab.errors import MqlabError, PluginError
from mqlab.live import pagetables
from mqlab.report import commands as report
from mqlab.results import paths
from mqlab.run.quiet import DEFAULT_LIMIT_S, DEFAULT_PERCENT
from mqlab.terminal import console as _console
from mqlab.terminal import printable
from mqlab.transport import PATTERNS

if TYPE_CHECKING:
    from mqlab.results.record import Run


def _duration_arg(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _percent_arg(text: str) -> float:
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage, got {text!r}") from None
    if not 0 < value <= 100:
        raise argparse.ArgumentTypeError(f"expected a percentage above 0 and up to 100, got {text}")
    return value


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

    if args.verbose and (args.top or args.table or args.markdown):
        given = "--top" if args.top else "--table" if args.table else "--markdown"
        raise CliError(f"--verbose adds terminal tables, not with {given}: leave one out",
                       EXIT_BAD_INPUT)  # fmt: skip

    if len(args.results) > 1 and args.table != "spread":
        raise CliError(f"{len(args.results)} results files: only --table spread reads more "
                       "than one; give one file", EXIT_BAD_INPUT)  # fmt: skip
    try:
        # a results file is user input too: checked field by field (mqlab.results.read), and
        # its text is shown, never interpreted
        runs = [load_run(path) for path in args.results]
    except ResultsError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    return _show_spread(args, runs) if args.table == "spread" else _show(args, runs[0])


def _show_spread(args: argparse.Namespace, runs: list[Run]) -> int:
    """``show RUN [RUN ...] --table spread``: each figure across the runs' repeats."""
    from mqlab.live import comparison, markdown, seedtables, spread

    rows = spread.rows([(r.name, r.steps) for r in runs])
    if args.markdown:
        names = ", ".join(dict.fromkeys(markdown.text(r.name) for r in runs))
        print(f"{names}: {spread.TITLE}\n\n{seedtables.markdown(spread.HEAD, rows)}")
    else:
        _console().print(seedtables.table(spread.TITLE, spread.HEAD, rows))
    for env in dict.fromkeys(comparison.environment_line(dict(r.environment)) for r in runs):
        print(f"Measured with {markdown.text(env)}." if args.markdown else f"measured with {env}")
    return 0


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
    if args.table:
        return _show_table(args, run)
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
    if args.verbose:  # what `mqlab run` printed after its comparison
        from mqlab.live import steptables

        stress = steptables.background_table(steps)
        for table in ([stress] if stress is not None else []) + steptables.details(steps):
            console.print(table)
    console.print(f"measured with {comparison.environment_line(env)}")
    return 0


def _show_table(args: argparse.Namespace, run: Run) -> int:
    """``show --table TABLE``: one of the tables of :mod:`mqlab.live.pagetables`."""
    from mqlab.live import markdown, seedtables

    built = pagetables.build(args.table, run.steps, run.environment)
    if not any(rows for _, _, rows in built):
        raise CliError(
            f"{run.path}: no step of this run has what --table {args.table} shows "
            f"({built[0][0]}): give a run of a profile that measures it", EXIT_BAD_INPUT,
        )  # fmt: skip
    for i, (title, head, rows) in enumerate(built):
        if args.markdown:
            said = f"{markdown.text(run.name)}: {title}" if i == 0 else title
            body = seedtables.markdown(head, rows) if rows else "(none)"
            print(("\n" if i else "") + f"{said}\n\n{body}")
        else:
            _console().print(seedtables.table(title, head, rows) if rows else f"{title}: none")
    return 0


# -- entry point ---------------------------------------------------------------


def _run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "profile",
        metavar="PROFILE",
        help="the profile (TOML) to run, e.g. profiles/quickstart.toml",
    )
    p.add_argument(
        "--duration",
        type=_duration_arg,
        metavar="DURATION",
        help="measurement window of each step (default: the profile's [run] duration, else 10s)",
    )
    p.add_argument(
        "--warmup",
        type=_duration_arg,
        metavar="DURATION",
        help="sending before each window, left out of every figure (default: the "
        "profile's [run] warmup, else 2s)",
    )
    p.add_argument(
        "-o", "--output", metavar="FILE", help=f"the results file (default: {paths.DEFAULT_NAME})"
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no live view and no progress lines: print only the tables at the end",
    )
    p.add_argument(
        "--processes",
        type=_positive_int,
        metavar="N",
        help="spread each step's clients over N worker processes (default: the "
        "profile's [run] processes, else 1)",
    )
    p.add_argument(
        "--broker",
        metavar="URL",
        help="use this broker (comma-separated URLs for a cluster) instead of the "
        "profile's, and start no managed one (default: the profile's [broker])",
    )
    p.add_argument(
        "--wait-quiet", nargs="?", const=DEFAULT_PERCENT, type=_percent_arg, metavar="PERCENT",
        help="before each step, wait until other processes take less than PERCENT of the "
        f"machine (default {DEFAULT_PERCENT:g} when given bare), for at most --wait-quiet-max",
    )  # fmt: skip
    p.add_argument(
        "--wait-quiet-max", type=_duration_arg, metavar="DURATION",
        help=f"the longest --wait-quiet waits before one step (default {DEFAULT_LIMIT_S:g}s); "
        "the step then runs and its record says the machine was not quiet",
    )  # fmt: skip
    p.add_argument("--state-dir", help=argparse.SUPPRESS)
    metrics.add_arguments(p, _duration_arg)


def build_parser() -> helptext.Parser:
    parser = helptext.Parser(
        prog="mqlab",
        description=(
            "Compare messaging drivers side by side: every driver in a profile runs the same "
            "RPC call, RPC cast and notification workloads against the same broker; mqlab shows "
            "live tables and writes a results file (throughput, latency percentiles, sent / "
            "received / lost / duplicated counts, CPU). The example needs no broker."
        ),
        example="mqlab run profiles/quickstart.toml",
        epilog=helptext.exit_codes(),
    )
    parser.add_argument("--version", action="version", version=f"mqlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        """Add the subcommand ``name`` (``help``: its one line, ``description``: the rest,
        ``example``: one command line); its parser is kept in ``parser.commands``."""
        parser.commands[name] = p = helptext.add(sub, name, **kwargs)
        return p

    p = command(
        "run",
        help="run a profile and write a results file",
        description="Runs every step of the profile (a driver x a scenario x a load level) in "
        "worker processes, shows live tables (in a terminal; elsewhere one line per finished "
        "step), prints the comparison table at the end, and rewrites the results file after "
        "every step. Ctrl-C stops after the current interval and keeps what was measured; a "
        "second Ctrl-C stops at once.",
        example="mqlab run profiles/quickstart.toml --duration 5s -o results/quickstart.json",
    )
    _run_arguments(p)
    p.set_defaults(func=cmd_run)

    p = command(
        "ceiling",
        help="run a profile with each cast step beside its library's ceiling",
        description="Runs the profile as `mqlab run` does; right after each plain cast step, on "
        "the same broker with the same message size and ack mode, runs the plugin's reference "
        "loop (its bare library publishing and consuming) and, for RabbitMQ, RabbitMQ PerfTest, "
        "then shows the plugin's rate as a percentage of each. PerfTest needs Java; its jars "
        "come from Maven Central into ~/.cache/mqlab (scripts/setup.sh fetches them where Java "
        "is, else the first `mqlab ceiling` does).",
        example="mqlab ceiling profiles/ceiling.toml",
    )
    _run_arguments(p)
    p.set_defaults(func=cmd_ceiling)

    p = command(
        "validate",
        help="check a profile without running it",
        description="Parses and checks every field, plugin and option of the profile and says "
        "how many steps it has and about how long it runs. Nothing starts.",
        example="mqlab validate profiles/pika-vs-kombu.toml",
    )
    p.add_argument("profile", metavar="PROFILE", help="the profile (TOML) to check")
    p.set_defaults(func=cmd_validate)

    p = command(
        "show",
        help="print a results file's comparison table again",
        description="Prints the comparison table of a finished (or interrupted) run from its "
        "results file, with the environment it was measured in.",
        example="mqlab show results/quickstart.json --markdown",
    )
    p.add_argument(
        "results",
        metavar="RESULTS",
        nargs="+",
        help="a results file (JSON) mqlab run wrote; several with --table spread",
    )
    p.add_argument("--markdown", action="store_true", help="print Markdown tables, to publish")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument(
        "--top",
        action="store_true",
        help="only each driver's best msg/s per pattern (the top-throughput table "
        "of the 2016 OpenStack message-queue report)",
    )
    shape.add_argument(
        "--table",
        choices=(tables := sorted([*pagetables.TABLES, "spread"])),
        metavar="TABLE",
        help="only one table in a profile's own shape, as docs/findings.md has it: "
        + ", ".join(tables)
        + " (spread: each figure across the repeats of several runs; default: the comparison)",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also what mqlab run prints at its end after the comparison: each "
        "step's phases, fault events and loss verdict, and the background stress",
    )
    p.set_defaults(func=cmd_show)
    report.add_commands(command)  # report, export, compare
    hosts.add_commands(command)  # hosts certs, check, up, down
    system.add_commands(command, _duration_arg)
    selftest.add_commands(command)

    p = command(
        "plugins",
        help="list the transport plugins mqlab can find",
        description="Lists every plugin registered under the entry-point group "
        "mqlab.transports: package, version, wire family, features and options, or why it "
        "fails to load.",
        example="mqlab plugins",
    )
    p.set_defaults(func=cmd_plugins)

    broker.add_commands(command, _positive_int)
    return parser


def _say_error(text: str) -> None:
    """The one line of a refusal or failure: scrubbed of secrets, control codes shown."""
    with contextlib.suppress(OSError):
        print(f"mqlab: {printable(redact.scrub(text))}", file=sys.stderr)


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM and SIGHUP clean up like Ctrl-C (`run` has its own)


#: the signals that stop mqlab as Ctrl-C does
_STOPS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def _ctrl_c_reaches_us() -> None:
    """Ctrl-C and the other stops reach mqlab whatever the parent left: a blocked signal or
    an ignored SIGINT is inherited across exec (a test runner's thread, a shell's background
    job), and a run would then go on to its end deaf to it while its broker starts."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT, *_STOPS))
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    _ctrl_c_reaches_us()
    previous = {sig: signal.signal(sig, _terminated) for sig in _STOPS}
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
