"""``mqlab run`` and ``mqlab ceiling``: the pipeline from a profile to a results file.

profile, check, plan, servers (managed ones started and stopped here), the runner with
its live monitor, and the results file, written after every step and kept whatever
ends the run (a failure, Ctrl-C, SIGTERM, a closed terminal).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from mqlab import __version__, machine, redact, registry
from mqlab.config.plan import Plan, make_plan
from mqlab.config.profile import Profile
from mqlab.console import metrics as metrics_cli
from mqlab.console import system
from mqlab.console.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    CliError,
    check,
    load,
)
from mqlab.errors import BrokerError, BrokerRefused, MqlabError
from mqlab.eventloop import run as run_loop
from mqlab.live import comparison, seedtables, steptables, tables
from mqlab.live.monitor import Monitor
from mqlab.live.snapshot import RunSnapshot
from mqlab.measure import ledger
from mqlab.record.step import StepRecord
from mqlab.registry import LoadedPlugin
from mqlab.results import environment, paths
from mqlab.results.calibration import codec_costs
from mqlab.results.store import ResultsFile
from mqlab.sdk.urls import mask
from mqlab.servers import managed
from mqlab.servers.brokerside import all_pids
from mqlab.servers.handle import ServerHandle
from mqlab.terminal import console as _console

if TYPE_CHECKING:
    from mqlab.live.exporter import MetricsServer
    from mqlab.run.controller import Runner
    from mqlab.servers.rabbithost import RemoteRabbitMQ


def _profile_record(profile: Profile, urls: Mapping[str, tuple[str, ...]]) -> dict[str, Any]:
    doc = dataclasses.asdict(profile)
    # every URL as the drivers used it, never with its password
    doc["broker"]["urls"] = [mask(u) for u in dict.fromkeys(u for us in urls.values() for u in us)]
    for driver in doc["drivers"]:
        driver["urls"] = [mask(u) for u in urls.get(driver["name"], ())]
        driver["options"] = [[k, redact.option_value(k, v)] for k, v in driver["options"]]
    doc["defaults"] = {
        k: (v.text if hasattr(v, "text") else v) for k, v in profile.defaults.items()
    }
    for sc in doc["scenarios"]:
        sc["message_size"] = sc["message_size"]["text"]
    return doc


def _servers_of(profile: Profile, plugins: Mapping[str, LoadedPlugin]) -> dict[str, str | None]:
    """Driver name -> the managed server kind it talks to (an option may pick it)."""
    return {
        d.name: plugins[d.name].cls.server_for(plugins[d.name].check(d.options_dict))
        for d in profile.drivers
    }


def cmd_run(args: argparse.Namespace) -> int:
    """The pipeline: profile, check, plan, servers, run, record."""
    profile = load(args.profile, args)
    if getattr(args, "wait_quiet_max", None) is not None and args.wait_quiet is None:
        raise CliError("--wait-quiet-max needs --wait-quiet[=PERCENT]", EXIT_BAD_INPUT)
    plugins = check(profile)
    if profile.hosts is not None:
        from mqlab.config.hosts import missing

        if missing():
            raise CliError(missing(), EXIT_BAD_INPUT)
        local = [n for n, p in plugins.items() if p.cls.features.in_process]
        if local:  # its servers and clients share one process: there is nothing to place
            raise CliError(
                f"{profile.path}: [hosts]: driver {local[0]} runs in one process and cannot "
                "be spread over hosts; remove it or [hosts]", EXIT_BAD_INPUT,
            )  # fmt: skip
        if not profile.hosts.insecure:  # before anything starts or is written
            from mqlab.hosts.certs import CertsError, usable

            try:
                usable(profile.hosts.certs)
            except CertsError as exc:
                raise CliError(f"{profile.path}: [hosts] certs: {exc}", EXIT_BAD_INPUT) from None
    plan = make_plan(profile)
    console = _console()
    err = _console(stderr=True)
    server_of = _servers_of(profile, plugins)
    kinds = managed.needed(server_of) if profile.broker.managed else []

    def say(line: str) -> None:
        if not args.quiet or line.startswith("mqlab:"):
            with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP)
                err.print(redact.scrub(line), soft_wrap=True)  # one line, as a log reads it

    state = Path(args.state_dir) if args.state_dir else None
    try:
        # claimed before any server starts: a refused output path costs nothing
        lock = paths.claim(args.output, profile.run.name, profile.path)
    except paths.OutputRefused as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    metrics: MetricsServer | None = None
    on_hosts: contextlib.ExitStack = contextlib.ExitStack()
    remote = None
    try:
        # before any server starts too: a taken metrics port costs nothing
        metrics = metrics_cli.start(
            args, profile.run.metrics_port, profile.run.name, str(lock.path), len(plan.steps)
        )
        if kinds and profile.hosts is not None and profile.hosts.brokers:
            remote = _broker_hosts(profile, on_hosts)
        with managed.managed(
            kinds, state, say, nodes=profile.broker.nodes, remote=remote
        ) as handles:
            urls = managed.endpoints(profile, server_of, handles)
            problem = managed.unreachable(urls, server_of)
            if problem:
                raise CliError(problem, EXIT_FAILED)
            if metrics is not None:
                line = metrics_cli.endpoints(metrics, handles)
                if args.quiet and metrics_cli.chosen(args, profile.run.metrics_port):
                    with contextlib.suppress(OSError):  # where to scrape: nothing else says it
                        err.print(line)
                else:
                    say(line)
            code = _run(
                args, profile, plan, plugins, urls, handles, console, err, lock.path, metrics,
                remote,
            )  # fmt: skip
            if metrics is not None and code != EXIT_INTERRUPTED:  # Ctrl-C means: stop now
                metrics_cli.linger(metrics, args.metrics_linger, say)
            return code
    except BrokerError as exc:
        code = EXIT_BAD_INPUT if isinstance(exc, BrokerRefused) else EXIT_FAILED
        raise CliError(f"managed broker: {exc}", code) from None
    finally:
        on_hosts.close()
        if metrics is not None:
            metrics.close()
        lock.release()


def _broker_hosts(profile: Profile, stack: contextlib.ExitStack) -> RemoteRabbitMQ:
    """The broker hosts reached (a line naming the host when one is not there): the starter
    of the managed RabbitMQ node on them."""
    from mqlab.hosts.cluster import HostsError
    from mqlab.hosts.reach import BrokerHosts
    from mqlab.servers.rabbithost import RemoteRabbitMQ

    assert profile.hosts is not None
    on = BrokerHosts(profile.hosts)
    stack.callback(on.close)
    try:
        on.open()
    except HostsError as exc:
        raise CliError(str(exc), EXIT_FAILED) from None
    return RemoteRabbitMQ(on)


def _run(
    args: argparse.Namespace,
    profile: Profile,
    plan: Plan,
    plugins: Mapping[str, LoadedPlugin],
    urls: Mapping[str, tuple[str, ...]],
    handles: Mapping[str, ServerHandle],
    console: Console,
    err: Console,
    out: Path,
    metrics: MetricsServer | None = None,
    remote: RemoteRabbitMQ | None = None,
) -> int:
    from mqlab.run import leftovers
    from mqlab.run.controller import Interrupted, Runner, StepFailed

    for path in leftovers.sweep():  # a run killed with SIGKILL (or a crash) left these
        with contextlib.suppress(OSError):
            err.print(f"mqlab: removed {path}, a step directory of a run that was killed")
    server_of = _servers_of(profile, plugins)
    # each driver's broker: every figure of a step comes from its own
    brokers = managed.sides(urls, server_of, handles, profile.broker.management_url, remote)

    def warn(line: str) -> None:
        with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP)
            err.print(redact.scrub(line), soft_wrap=True)  # one line, never wrapped

    # before the codec's cost is measured: that measuring would count as this run's own load
    found = machine.facts(machine.measure_others(1.0, all_pids(brokers.values())))
    for line in system.off_lines(found):
        warn(line)
    if not args.quiet:
        err.print(f"{profile.run.name}: measuring codec costs…")
    broker_info = managed.environment_broker(brokers)
    env = environment.gather(
        registry.discover(), broker_info, {d.plugin for d in profile.drivers}, found
    )
    env["codec_cost_us"] = codec_costs(profile)
    # every managed server, not only the first driver's (RabbitMQ and Artemis in one run)
    env["servers"] = environment.servers(handles)  # with what durable meant on each
    env["metrics"] = metrics_cli.recorded(metrics)  # where the endpoint was, the port it got
    results = ResultsFile(out, _profile_record(profile, urls), env, warn)
    if not results.write():
        raise CliError(results.write_error or "cannot write the results file", EXIT_FAILED)
    if ledger.LEDGER_BYTES < ledger.FULL_BYTES:  # workers inherit this process's limit
        warn(
            f"mqlab: the file-size limit (ulimit -f) leaves room for {ledger.LEDGER_BYTES * 8:,} "
            "messages per client in a step's receipt ledger; later ones count as LedgerOverflow "
            "errors and losses (raise it: ulimit -f unlimited)"
        )
    interactive = console.is_terminal and not args.quiet
    if not args.quiet:
        err.print(
            f"mqlab {__version__}: {profile.run.name}: {len(plan.steps)} step(s), "
            f"about {plan.eta() / 60:.1f} min; results -> {out}"
        )
    monitor: Monitor | None = None

    def on_snapshot(snap: RunSnapshot) -> None:
        if monitor is not None:
            monitor.update(snap)
        if metrics is not None:  # beside the view: it reads the same snapshots
            metrics.exporter.snapshot(snap)

    def on_step(record: StepRecord) -> None:
        results.add_step(record)
        if metrics is not None:
            metrics.exporter.step(record)
        if not interactive and not args.quiet:
            row = runner.progress.finished_rows[-1]
            print(tables.plain_line(row, len(plan.steps)), flush=True)

    run_id = uuid.uuid4().hex[:6]
    ceilings = None
    if getattr(args, "ceiling", False):
        from mqlab.ceiling.hook import Ceilings

        ceilings = Ceilings(
            urls, {d.name: plugins[d.name].check(d.options_dict) for d in profile.drivers},
            server_of, profile.run.warmup, profile.run.duration, profile.placement,
        )  # fmt: skip
    gate = None
    if getattr(args, "wait_quiet", None) is not None:
        from mqlab.run.quiet import DEFAULT_LIMIT_S, QuietGate

        gate = QuietGate(
            args.wait_quiet, args.wait_quiet_max or DEFAULT_LIMIT_S,
            ours=lambda: all_pids(brokers.values()), log=None if interactive else warn,
        )  # fmt: skip
    runner = Runner(
        plan, urls, run_id, lambda p: registry.get(p).cls.features.in_process,
        on_snapshot, on_step, brokers, after_step=ceilings, quiet=gate,
    )  # fmt: skip
    # "done" only once the run has returned: whatever else ends it is no finished run
    status, message, code = "failed", "stopped by an error", EXIT_FAILED
    before_steps = False  # it failed before any step could start (the hosts unreachable)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        main_task = asyncio.current_task()

        def on_sigint() -> None:
            said = ctrl_c(runner, main_task)
            with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP)
                err.print(f"\n{said}")

        # a closed terminal (SIGHUP) or a kill (SIGTERM) stops as cleanly as Ctrl-C:
        # the measured steps are written and a managed broker is stopped
        # SIGQUIT (Ctrl-\) too: by default it ends Python at once, leaving the results
        # file "running", its lock and the step's directory behind
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            loop.add_signal_handler(sig, on_sigint)
        if monitor is not None:
            monitor.attach(loop)
        async with runner:
            await runner.run()

    if interactive:
        monitor = Monitor(console, on_next=runner.skip.set, on_quit=runner.stop_after.set)
        monitor.start()
    try:
        run_loop(main)
        status, message, code = "done", "", 0
    except StepFailed as exc:
        status, message, code = "failed", str(exc), EXIT_FAILED
    except MqlabError as exc:  # before the steps: the Dask scheduler or a host not there
        status, message, code = "failed", str(exc), EXIT_FAILED
        before_steps = not results.doc["steps"]
    except (Interrupted, asyncio.CancelledError, KeyboardInterrupt):
        status, message, code = "interrupted", "stopped by the user", EXIT_INTERRUPTED
    finally:
        if runner.interrupt.is_set() and code == 0:
            status, message, code = "interrupted", "stopped by the user", EXIT_INTERRUPTED
        elif runner.stop_after.is_set() and code == 0 and len(results.steps) < len(plan.steps):
            status, message, code = "interrupted", "stopped by the user (q)", EXIT_INTERRUPTED
        # the results first: the terminal may be gone (SIGHUP), the figures must not be
        results.finish(status, redact.scrub(message))
        if monitor is not None:
            with contextlib.suppress(OSError):
                monitor.stop()
    steps = results.steps
    if steps:
        with contextlib.suppress(OSError):
            console.print(comparison.comparison(steps))
            stress = steptables.background_table(steps)
            if stress is not None:  # what each probe's background achieved and lost
                console.print(stress)
            times = seedtables.times_rows(steps)
            if times:  # seed 002's real / user / sys per step
                title = "time in the window: real, and the processes' own user and sys seconds"
                console.print(seedtables.table(title, seedtables.TIMES_HEADER, times))
            for table in steptables.details(steps):  # phases, fault events, verdicts
                console.print(table)
            if ceilings is not None:
                show_ceilings(console, steps)
            costs = ", ".join(f"{k}: {v:.1f} µs" for k, v in env["codec_cost_us"].items())
            console.print(f"codec cost per message (encode + decode, this machine): {costs}")
    if code == EXIT_FAILED and before_steps:
        raise CliError(f"{message} (results: {out}, no step measured)", EXIT_FAILED)
    if code == EXIT_FAILED:
        failed_at = len(steps) + 1
        step = plan.steps[failed_at - 1] if failed_at <= len(plan.steps) else None
        where = f"step {failed_at} ({step.label})" if step else "run"
        raise CliError(f"{where} failed: {message} (results so far: {out})", EXIT_FAILED)
    if results.write_error:
        raise CliError(
            f"{results.write_error}; what was measured is printed above, the file keeps "
            f"{len(steps)} fewer step(s) or its last good copy", EXIT_FAILED,
        )  # fmt: skip
    if not args.quiet:
        err.print(f"results: {out} ({len(steps)} of {len(plan.steps)} steps, {status})")
    return code


def ctrl_c(runner: Runner, main_task: asyncio.Task[Any] | None) -> str:
    """What one Ctrl-C (or SIGTERM, SIGHUP) does, by how many came before; the line to say.

    The first ends the window at the interval; a later one stops now, except that a step
    whose window has closed is kept: its waits are cut short (``drain_end: user``) and its
    record is written before the run stops. One more abandons even that.
    """
    if not runner.interrupt.is_set():
        runner.interrupt.set()
        return "stopping after this interval (Ctrl-C again to stop now)…"
    if runner.measured and not runner.force.is_set():
        runner.force.set()
        return "stopping now; writing the measured step first (Ctrl-C again to abandon it)…"
    runner.force.set()
    if main_task is not None:
        main_task.cancel()
    return "stopping now…"


def show_ceilings(console: Console, steps: list[StepRecord]) -> None:
    from mqlab.ceiling import hook

    table = hook.table(steps)
    if table is None:
        console.print("ceiling: no plain cast step in this profile, so nothing to compare")
        return
    console.print(table)
    for line in hook.notes(steps):
        console.print(Text(redact.scrub(line)))


def cmd_ceiling(args: argparse.Namespace) -> int:
    """`mqlab run` with each cast step's reference loop and PerfTest right after it."""
    args.ceiling = True
    return cmd_run(args)
