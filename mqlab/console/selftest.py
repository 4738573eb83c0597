"""``mqlab selftest``: mqlab's own accounting checked on this machine against known answers.

It runs the known-answer cases (:mod:`mqlab.faults.knowncases`) with ``mqlab run`` in a
child process: the loopback alone (no broker), then pika against a managed RabbitMQ node
alone and with each kind of event (a server killed, a link cut held to the end, a delay,
the node killed and started again, flow control). The wrapped plugins are registered the
way a user's plugin is, by an installed distribution's entry points, in a temporary site
directory on the child's ``PYTHONPATH`` (so its worker processes find them too). Per case
it prints the expected and the found account and whether it was found; it exits 1 if any
was not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.table import Table

from mqlab.console.common import EXIT_BAD_INPUT, EXIT_FAILED, CliError
from mqlab.faults import knowncases
from mqlab.record.step import StepRecord
from mqlab.record.wire import from_wire
from mqlab.terminal import console

__all__ = ["add_commands", "cmd_selftest"]

#: what the command runs: each plugin wrapped, where its server is, the cases it can run
WHERE = {
    "loopback": ("", ""),
    "pika": ("[broker]\nmanaged = true\n", ""),
}


def cmd_selftest(args: argparse.Namespace) -> int:
    cases: Sequence[str] = args.case or list(knowncases.CASES)
    unknown = sorted(set(cases) - set(knowncases.CASES))
    if unknown:
        raise CliError(
            f"selftest: no case {', '.join(unknown)}; the cases are {', '.join(knowncases.CASES)}",
            EXIT_BAD_INPUT,
        )
    out = console()
    found: list[tuple[str, knowncases.Found]] = []
    with tempfile.TemporaryDirectory(prefix="mqlab-selftest-") as tmp:
        site = knowncases.register(Path(tmp) / "site")
        for plugin, (head, url) in WHERE.items():
            mine = [c for c in knowncases.PLUGINS[plugin] if c in cases]
            if not mine:
                continue
            out.print(f"selftest: {plugin}: {', '.join(mine)} ...")
            found += [(plugin, f) for f in _run(site, Path(tmp), plugin, mine, head, url)]
    table = Table("plugin", "case", "expected", "found", "found?", show_lines=True)
    for plugin, f in found:
        table.add_row(plugin, f.case, f.expected, f.found, "yes" if f.ok else "NO")
    out.print(table)
    missed = [f"{p} {f.case}" for p, f in found if not f.ok]
    if missed:
        out.print(f"selftest: not found: {', '.join(missed)}")
        return EXIT_FAILED
    out.print(f"selftest: every known answer found ({len(found)} cases)")
    return 0


def _run(
    site: Path, tmp: Path, plugin: str, cases: Sequence[str], head: str, url: str
) -> list[knowncases.Found]:
    """Run ``cases`` of ``plugin`` wrapped, one step each, and check each step."""
    topic = f"selftest{uuid.uuid4().hex[:8]}"
    profile, out = tmp / f"{plugin}.toml", tmp / f"{plugin}.json"
    profile.write_text(knowncases.profile(plugin, cases, head, url, topic))
    old = os.environ.get("PYTHONPATH", "")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(site), old)))}
    proc = subprocess.run(
        [sys.executable, "-m", "mqlab.console.cli", "run", "-q", str(profile), "-o", str(out)],
        capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if proc.returncode != 0 or not out.exists():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise CliError(f"selftest: the {plugin} run failed: {last}", EXIT_FAILED)
    steps = {s["scenario"]: s for s in json.loads(out.read_text())["steps"]}
    return [
        knowncases.check(c, from_wire(StepRecord, steps[c]))
        if c in steps
        else knowncases.Found(knowncases.CASES[c].name, "a step", "no step", False)
        for c in cases
    ]


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Register ``selftest`` through the CLI's ``command(name, **kwargs)``."""
    p = command(
        "selftest",
        help="check mqlab's own accounting against known answers",
        description="Runs the known-answer cases: plugins whose servers silently drop, "
        "duplicate and delay chosen message numbers, alone and with each kind of event, on "
        "the loopback and on a managed RabbitMQ node (started and stopped by mqlab); prints "
        "per case the account expected and the one found; exits 1 if any was not found.",
        example="mqlab selftest --case alone",
    )
    p.add_argument(
        "--case", action="append", metavar="CASE",
        help=f"run only this case (repeatable; default: every case): {', '.join(knowncases.CASES)}",
    )  # fmt: skip
    p.set_defaults(func=cmd_selftest)
