"""``mqlab system``: what on this machine makes figures move, as pyperf's ``system show``.

The same facts (:mod:`mqlab.machine`) are stored in every results file's environment, and
``mqlab run`` names the ones that are off before its first step.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable

from mqlab.console.common import EXIT_BAD_INPUT, CliError
from mqlab.machine import facts, measure_others
from mqlab.record.trust import Fact
from mqlab.terminal import printable

__all__ = ["add_commands", "lines", "off_lines"]


def lines(found: Iterable[Fact]) -> list[str]:
    """One line per fact; ``!`` marks one that moves figures, with what to do."""
    return [f"{'!' if f.off else ' '} {f.line}" for f in found]


def off_lines(found: Iterable[Fact]) -> list[str]:
    """What ``mqlab run`` says before it starts: only the facts that are off."""
    off = [f for f in found if f.off]
    if not off:
        return []
    return [
        "mqlab: this machine may move the figures (`mqlab system` for all its facts):",
        *(f"mqlab:   {f.line}" for f in off),
    ]


def cmd_system(args: argparse.Namespace) -> int:
    if not 0.1 <= args.sample <= 60:
        raise CliError(
            f"--sample {args.sample:g}s: give 100ms to 60s (a CPU share needs time to show)",
            EXIT_BAD_INPUT,
        )
    found = facts(measure_others(args.sample))
    print(f"mqlab system: what on this machine makes figures move (sampled {args.sample:g} s)")
    for line in lines(found):
        print(printable(line))  # process names are other users' text
    off = sum(f.off for f in found)
    print(f"{off} of {len(found)} off" if off else "nothing off")
    return 0


def add_commands(
    command: Callable[..., argparse.ArgumentParser], duration: Callable[[str], float]
) -> None:
    p = command(
        "system", help="what on this machine makes figures move",
        description="Shows, as pyperf's `system show` does: CPUs online, frequency governor "
        "and turbo (where readable), isolated CPUs, transparent huge pages, the load average, "
        "and over a short sample the CPU other processes take, the steal, the run queue and "
        "the heaviest other processes. Lines marked ! are off, with what to do. Every results "
        "file stores the same facts.",
        example="mqlab system --sample 2s",
    )  # fmt: skip
    p.add_argument(
        "--sample", type=duration, default=1.0, metavar="DURATION",
        help="how long to sample the machine's CPU (default 1s)",
    )  # fmt: skip
    p.set_defaults(func=cmd_system)
