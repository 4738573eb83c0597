"""``mqlab hosts up INVENTORY``, ``hosts down INVENTORY`` and ``hosts check INVENTORY``: the
hosts of an inventory brought up over SSH, stopped, and checked one by one."""

from __future__ import annotations

import argparse
import tomllib
from typing import Any

from mqlab.console import helptext
from mqlab.console.common import EXIT_BAD_INPUT, EXIT_FAILED, CliError
from mqlab.errors import ProfileError

__all__ = ["add_actions", "cmd_check_inventory", "is_inventory"]

_INVENTORY = "the inventory (TOML): the scheduler and the hosts, as docs/hosts.md shows"


def is_inventory(path: str) -> bool:
    """An inventory has ``[[host]]`` tables and no drivers; anything else is a profile."""
    try:
        with open(path, "rb") as f:
            data = tomllib.loads(f.read(1 << 20).decode("utf-8", "replace"))
    except (OSError, tomllib.TOMLDecodeError, ValueError):
        return False
    return "host" in data and "drivers" not in data


def _inventory(path: str) -> Any:
    import importlib.util

    from mqlab.config.hosts import missing

    if missing():
        raise CliError(missing().replace("[hosts] needs", "mqlab hosts needs"), EXIT_BAD_INPUT)
    if importlib.util.find_spec("asyncssh") is None:
        raise CliError('mqlab hosts needs asyncssh, which this mqlab lacks: pip install '
                       '"mqlab[hosts]"', EXIT_BAD_INPUT)  # fmt: skip
    from mqlab.config.inventory import load_inventory

    try:
        return load_inventory(path)
    except ProfileError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None


def cmd_hosts_up(args: argparse.Namespace) -> int:
    inv = _inventory(args.inventory)
    from mqlab.config.inventory import DASHBOARD_PORT
    from mqlab.hosts.certs import CertsError
    from mqlab.hosts.cluster import HostsError
    from mqlab.hosts.deploy import up

    try:
        said = up(inv)
    except CertsError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    except HostsError as exc:
        raise CliError(str(exc), EXIT_FAILED) from None
    pids = said["pids"]
    where = f"on the scheduler host's 127.0.0.1:{DASHBOARD_PORT}" if inv.dashboard else "off"
    print(f"scheduler {said['scheduler']} on {inv.scheduler.address} (pid {pids['scheduler']}), "
          f"dashboard {where}")  # fmt: skip
    for h in inv.hosts:
        print(f"{h.name} ({', '.join(h.roles)}) on {h.address} (pid {pids[h.name]})")
    print(f"stop them with `mqlab hosts down {inv.path}`; for a profile:\n")
    print(inv.hosts_table())
    return 0


def cmd_hosts_down(args: argparse.Namespace) -> int:
    inv = _inventory(args.inventory)
    from mqlab.hosts.cluster import HostsError
    from mqlab.hosts.deploy import down

    try:
        lines, clean = down(inv)
    except HostsError as exc:
        raise CliError(str(exc), EXIT_FAILED) from None
    for line in lines:
        print(line)
    if not clean:
        raise CliError(
            f"some processes may still run; `mqlab hosts down {inv.path}` again once the "
            "hosts are reachable",
            EXIT_FAILED,
        )
    return 0


def cmd_check_inventory(args: argparse.Namespace) -> int:
    inv = _inventory(args.profile)
    import asyncio

    from mqlab.hosts.certs import CertsError
    from mqlab.hosts.cluster import HostsError
    from mqlab.hosts.deploy import read_state
    from mqlab.hosts.survey import survey

    try:
        state = read_state(inv) or {}
        found = asyncio.run(survey(inv, state.get("scheduler") or inv.scheduler_url))
    except (HostsError, CertsError) as exc:
        raise CliError(str(exc), EXIT_FAILED) from None
    for h in found:
        print(h.text)
    bad = [h.name for h in found if not h.ok]
    if bad:
        raise CliError(f"not ready: {', '.join(bad)}", EXIT_FAILED)
    return 0


def add_actions(sub: Any) -> None:
    u = helptext.add(
        sub, "up", help="start the scheduler and the Dask workers of INVENTORY over SSH",
        description="Starts a TLS Dask scheduler and a named Dask worker on each host the "
        "inventory lists, over SSH, checks each runs the same mqlab, and prints their PIDs and "
        "the [hosts] table to put in a profile.",
        example="mqlab hosts up hosts.toml",
    )  # fmt: skip
    u.add_argument("inventory", metavar="INVENTORY", help=_INVENTORY)
    u.set_defaults(func=cmd_hosts_up)
    d = helptext.add(
        sub, "down", help="stop what `mqlab hosts up INVENTORY` started, by PID",
        description="Stops the scheduler and every worker that `mqlab hosts up` started from "
        "this inventory, by the PIDs it recorded beside it.",
        example="mqlab hosts down hosts.toml",
    )  # fmt: skip
    d.add_argument("inventory", metavar="INVENTORY", help=_INVENTORY)
    d.set_defaults(func=cmd_hosts_down)
