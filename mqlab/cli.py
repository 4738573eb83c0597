"""The ``mqlab`` command line.

Every expected failure ends as one readable line on stderr and a non-zero exit:
2 for bad input (profile, plugin, option), 1 for a run that could not go on
(broker down, a worker that would not start), 130 after Ctrl-C. Results
measured before a failure are always written.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import shutil
import signal
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from mqlab import __version__, registry
from mqlab.errors import BrokerError, MqlabError, OptionError, PluginError, ProfileError
from mqlab.eventloop import run as run_loop
from mqlab.plan import Plan, make_plan
from mqlab.profile import Profile, load_profile, parse_duration
from mqlab.results import ResultsFile
from mqlab.snapshot import RunSnapshot
from mqlab.transport import Transport
from mqlab.urls import host_port, mask

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


class CliError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


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


# -- checking a profile --------------------------------------------------------


def check(profile: Profile) -> dict[str, type[Transport]]:
    """Load every driver's plugin and check its options and patterns; exit 2 on a problem."""
    plugins = registry.discover()
    classes: dict[str, type[Transport]] = {}
    for d in profile.drivers:
        where = f"{profile.path}: drivers.{d.name}"
        try:
            cls = registry.get(d.plugin, plugins)
            cls.check_options(d.plugin, d.options_dict)
        except PluginError as exc:
            raise CliError(f"{where}.plugin: {exc}", EXIT_BAD_INPUT) from None
        except OptionError as exc:
            raise CliError(f"{where}.{exc.option}: {exc.problem}", EXIT_BAD_INPUT) from None
        classes[d.name] = cls
    for i, sc in enumerate(profile.scenarios):
        for d in profile.drivers:
            if sc.drivers and d.name not in sc.drivers:
                continue
            feats = classes[d.name].features
            if sc.pattern not in feats.patterns:
                raise CliError(
                    f"{profile.path}: scenario[{i}].pattern: driver {d.name!r} (plugin "
                    f"{d.plugin!r}) does not support {sc.pattern!r}; limit the scenario with "
                    f"drivers = [...]",
                    EXIT_BAD_INPUT,
                )
            if sc.fanout and not feats.fanout:
                raise CliError(
                    f"{profile.path}: scenario[{i}].fanout: plugin {d.plugin!r} has no fanout",
                    EXIT_BAD_INPUT,
                )
    return classes


def _load(path: str, args: argparse.Namespace | None = None) -> Profile:
    try:
        profile = load_profile(path)
    except ProfileError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    if args is not None:
        profile = profile.with_overrides(args.duration, args.warmup, args.processes, args.broker)
    return profile


def cmd_validate(args: argparse.Namespace) -> int:
    profile = _load(args.profile)
    check(profile)
    plan = make_plan(profile)
    print(
        f"{profile.path}: ok: {len(profile.drivers)} driver(s), {len(profile.scenarios)} "
        f"scenario(s), {len(plan.steps)} step(s), about {plan.eta() / 60:.1f} min"
    )
    return 0


def _console(stderr: bool = False) -> Console:
    # a pipe or CI log has no width: give tables room rather than truncating figures
    tty = (sys.stderr if stderr else sys.stdout).isatty()
    return Console(stderr=stderr) if tty else Console(stderr=stderr, width=160)


def cmd_plugins(args: argparse.Namespace) -> int:
    console = _console()
    table = Table(title="mqlab plugins (entry-point group mqlab.transports)", title_justify="left")
    for col in ("plugin", "package", "version", "wire", "features", "options"):
        table.add_column(col)
    for name, info in registry.discover().items():
        try:
            cls = registry.load(info)
        except PluginError as exc:
            table.add_row(name, info.package, info.version, "-", f"[red]{exc}[/red]", "")
            continue
        f = cls.features
        feats = ", ".join(
            [*sorted(f.patterns)]
            + [k for k in ("at_most_once", "mandatory", "durable", "fanout") if getattr(f, k)]
            + ([] if f.needs_broker else ["no broker"])
        )
        opts = ", ".join(f"{k}={v.default!r}" for k, v in cls.options.items())
        table.add_row(name, info.package, info.version, cls.wire, feats, opts)
    console.print(table)
    return 0


# -- running -------------------------------------------------------------------


def _reachable(urls: Sequence[str]) -> str | None:
    """None if one broker URL accepts TCP connections, else why not (one line)."""
    reasons = []
    for url in urls:
        host, port = host_port(url)
        try:
            with socket.create_connection((host, port), timeout=3):
                return None
        except OSError as exc:
            reasons.append(f"{host}:{port} ({exc.strerror or exc})")
    return (
        f"cannot reach the broker at {', '.join(reasons)}: start one with `mqlab broker start`, "
        "set [broker] managed = true in the profile, or pass --broker URL"
    )


def _profile_record(profile: Profile, urls: Sequence[str]) -> dict[str, Any]:
    doc = dataclasses.asdict(profile)
    doc["broker"]["urls"] = [mask(u) for u in urls]
    doc["defaults"] = {
        k: (v.text if hasattr(v, "text") else v) for k, v in profile.defaults.items()
    }
    for sc in doc["scenarios"]:
        sc["message_size"] = sc["message_size"]["text"]
    return doc


def cmd_run(args: argparse.Namespace) -> int:
    profile = _load(args.profile, args)
    classes = check(profile)
    plan = make_plan(profile)
    console = _console()
    err = _console(stderr=True)
    managed = None
    urls = profile.broker.urls
    needs_broker = any(c.features.needs_broker for c in classes.values())
    if profile.broker.managed and needs_broker:
        from mqlab import broker as broker_mod

        problem = broker_mod.installed()
        if problem:
            raise CliError(problem, EXIT_FAILED)
        if not args.quiet:
            what = "node" if profile.broker.nodes == 1 else f"{profile.broker.nodes}-node cluster"
            err.print(f"starting a private RabbitMQ {what} for this run…")
        # a run's node lives in its own state dir: never collides with `mqlab broker start`
        state = Path(args.state_dir) if args.state_dir else Path(tempfile.mkdtemp(prefix="mqlab-"))
        try:
            managed = broker_mod.start(state, nodes=profile.broker.nodes)
        except BrokerError as exc:
            if not args.state_dir:
                shutil.rmtree(state, ignore_errors=True)
            raise CliError(f"managed broker: {exc}", EXIT_FAILED) from None
        urls = managed.urls
    try:
        if needs_broker:
            problem = _reachable(urls)
            if problem:
                raise CliError(problem, EXIT_FAILED)
        return _run(args, profile, plan, needs_broker, urls, managed, console, err)
    finally:
        if managed is not None:
            from mqlab import broker as broker_mod

            if not args.quiet:
                with contextlib.suppress(OSError):
                    err.print("stopping the private RabbitMQ node(s)…")
            try:
                broker_mod.stop(managed.state_dir)
            except BrokerError as exc:
                err.print(f"mqlab: could not stop the managed broker: {exc}")
            else:
                if not args.state_dir:
                    shutil.rmtree(managed.state_dir, ignore_errors=True)


def codec_costs(profile: Profile) -> dict[str, float]:
    """Encode + decode microseconds per message for each codec setting the profile uses."""
    from mqlab.codec import Codec, cost_us
    from mqlab.sizes import SizeSampler

    out: dict[str, float] = {}
    for sc in profile.scenarios:
        key = codec_key(sc.serializer, sc.envelope, sc.message_size.text)
        if key not in out:
            sampler = SizeSampler(sc.message_size, seed=1)
            sizes = [sampler.next() for _ in range(2000)]
            out[key] = round(cost_us(Codec(sc.serializer, sc.envelope), sizes), 2)
    return out


def codec_key(serializer: str, envelope: bool, size: str) -> str:
    return f"{serializer}{'+envelope' if envelope else ''} {size}"


def _broker_facts(urls: Sequence[str], managed: Any) -> tuple[dict[str, Any] | None, int | None]:
    from mqlab import environment

    if managed is not None:
        info = environment.broker_version(managed.url, managed.management_url)
        return ({"managed": True, **(info or {"product": "RabbitMQ", "version": managed.version})},
                managed.pid)  # fmt: skip
    info = environment.amqp_server(urls[0])
    pid = None
    host, port = host_port(urls[0])
    if host in ("127.0.0.1", "localhost", "::1"):
        try:
            from mqlab import broker as broker_mod

            pid = broker_mod.find_pid(port)
        except Exception:  # noqa: BLE001 - CPU sampling is best effort; said in the results
            pid = None
    return ({"managed": False, **info} if info else None), pid


def _run(
    args: argparse.Namespace,
    profile: Profile,
    plan: Plan,
    needs_broker: bool,
    urls: tuple[str, ...],
    managed: Any,
    console: Console,
    err: Console,
) -> int:
    from mqlab import environment, view
    from mqlab.runner import Interrupted, Runner, StepFailed

    broker_info, broker_pid = _broker_facts(urls, managed) if needs_broker else (None, None)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.output) if args.output else Path("results") / f"{profile.run.name}-{stamp}.json"
    env = environment.gather(registry.discover(), broker_info, {d.plugin for d in profile.drivers})
    env["codec_cost_us"] = codec_costs(profile)
    results = ResultsFile(out, _profile_record(profile, urls), env)
    results.write()
    interactive = console.is_terminal and not args.quiet
    if not args.quiet:
        err.print(
            f"mqlab {__version__}: {profile.run.name}: {len(plan.steps)} step(s), "
            f"about {plan.eta() / 60:.1f} min; results -> {out}"
        )
    live: Live | None = None

    def on_snapshot(snap: RunSnapshot) -> None:
        if live is not None:
            live.update(view.live(snap))

    def on_step(record: dict[str, Any]) -> None:
        results.add_step(record)
        if not interactive and not args.quiet:
            row = runner.finished_rows[-1]
            print(view.plain_line(row, len(plan.steps)), flush=True)

    run_id = uuid.uuid4().hex[:6]
    runner = Runner(
        plan, urls, run_id, lambda p: registry.get(p).features.in_process,
        on_snapshot, on_step, broker_pid,
        broker_label="" if needs_broker else "none needed",
    )  # fmt: skip
    status, message, code = "done", "", 0

    async def main() -> None:
        loop = asyncio.get_running_loop()
        main_task = asyncio.current_task()

        def on_sigint() -> None:
            if runner.interrupt.is_set():
                runner.force.set()
                if main_task is not None:
                    main_task.cancel()
            else:
                runner.interrupt.set()
                with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP)
                    err.print("\nstopping after this interval (Ctrl-C again to stop now)…")

        # a closed terminal (SIGHUP) or a kill (SIGTERM) stops as cleanly as Ctrl-C:
        # the measured steps are written and a managed broker is stopped
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, on_sigint)
        async with runner:
            await runner.run()

    if interactive:
        live = Live(console=console, refresh_per_second=4, transient=False)
        live.start()
    try:
        run_loop(main)
    except StepFailed as exc:
        status, message, code = "failed", str(exc), EXIT_FAILED
    except (Interrupted, asyncio.CancelledError, KeyboardInterrupt):
        status, message, code = "interrupted", "stopped by the user", EXIT_INTERRUPTED
    finally:
        if runner.interrupt.is_set() and code == 0:
            status, message, code = "interrupted", "stopped by the user", EXIT_INTERRUPTED
        # the results first: the terminal may be gone (SIGHUP), the figures must not be
        results.finish(status, message)
        if live is not None:
            with contextlib.suppress(OSError):
                live.stop()
    steps = results.doc["steps"]
    if steps:
        with contextlib.suppress(OSError):
            console.print(view.comparison(steps))
            costs = ", ".join(f"{k}: {v:.1f} µs" for k, v in env["codec_cost_us"].items())
            console.print(f"codec cost per message (encode + decode, this machine): {costs}")
    if code == EXIT_FAILED:
        failed_at = len(steps) + 1
        step = plan.steps[failed_at - 1] if failed_at <= len(plan.steps) else None
        where = f"step {failed_at} ({step.label})" if step else "run"
        raise CliError(f"{where} failed: {message} (results so far: {out})", EXIT_FAILED)
    if not args.quiet:
        err.print(f"results: {out} ({len(steps)} of {len(plan.steps)} steps, {status})")
    return code


def cmd_show(args: argparse.Namespace) -> int:
    from mqlab import view
    from mqlab.results import load_results

    try:
        doc = load_results(args.results)
    except (OSError, ValueError) as exc:
        raise CliError(
            f"{args.results}: cannot read the results file: {exc}", EXIT_BAD_INPUT
        ) from None
    steps = doc.get("steps", [])
    env = doc.get("environment", {})
    name = doc.get("profile", {}).get("run", {}).get("name", "?")
    status = f"{len(steps)} step(s), {doc.get('status')}"
    if args.markdown:
        print(f"{name}: {status}\n\n{view.comparison_markdown(steps)}\n\n"
              f"Measured with {view.environment_line(env)}.")  # fmt: skip
        return 0
    console = _console()
    console.print(f"{name}: {status}")
    if steps:
        console.print(view.comparison(steps))
    console.print(f"measured with {view.environment_line(env)}")
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
            cluster = rabbitmq.start(state, port=args.port, nodes=args.nodes)
            what = "node" if len(cluster.nodes) == 1 else f"{len(cluster.nodes)}-node cluster"
            print(
                f"RabbitMQ {cluster.version} {what} ready in {time.monotonic() - t:.1f}s; "
                "stop it with `mqlab broker stop`"
            )
            for i, node in enumerate(cluster.nodes, start=1):
                print(
                    f"  node{i} {node.name}: {mask(node.url)} (management "
                    f"{node.management_url}, distribution {node.dist_port}, pid {node.pid})"
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
        raise CliError(str(exc), EXIT_FAILED) from None
    return 0


# -- entry point ---------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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

    p = sub.add_parser(
        "run", help="run a profile and write a results file",
        description="Run every step of a profile (driver x scenario x load level) in worker "
        "processes, show live tables, and write a results JSON file after every step. "
        "Ctrl-C stops after the current interval and keeps what was measured; a second "
        "Ctrl-C stops at once.",
    )  # fmt: skip
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
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "validate",
        help="check a profile without running it",
        description="Parse and check a profile: fields, plugins, options.",
    )
    p.add_argument("profile")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("show", help="print a results file's comparison table again",
                       description="Print the comparison table of a finished (or interrupted) "
                       "run from its results file, with the environment it was measured in; "
                       "--markdown prints a Markdown table for publishing.")  # fmt: skip
    p.add_argument("results", help="a results JSON file written by mqlab run")
    p.add_argument("--markdown", action="store_true", help="print Markdown instead")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("plugins", help="list the transport plugins mqlab can find",
                       description="List every plugin registered under the entry-point group "
                       "mqlab.transports: package, version, wire family, features and options, "
                       "or why it fails to load.")  # fmt: skip
    p.set_defaults(func=cmd_plugins)

    p = sub.add_parser(
        "broker", help="start, stop or inspect a private local RabbitMQ node or cluster",
        description="Private RabbitMQ nodes, each with its own name, ports and data directory "
        "(AMQP 1.0 and management plugins on), clustered when --nodes > 1, for clean, "
        "reproducible runs.",
    )  # fmt: skip
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--port", type=int, help="AMQP port (default: a free one)")
    p.add_argument("--nodes", type=_positive_int, default=1,
                   help="cluster size, 1 to 5 nodes on this machine (default 1)")  # fmt: skip
    p.add_argument(
        "--state-dir", help="where the node keeps its data (default ~/.local/state/mqlab)"
    )
    p.set_defaults(func=cmd_broker)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except CliError as exc:
        print(f"mqlab: {exc}", file=sys.stderr)
        return exc.code
    except MqlabError as exc:
        print(f"mqlab: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("mqlab: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
