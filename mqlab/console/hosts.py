"""``mqlab hosts``: the certificates of a TLS Dask cluster, and a profile's hosts checked."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from mqlab.console import helptext, hostsup
from mqlab.console.common import EXIT_BAD_INPUT, EXIT_FAILED, CliError, load


def _needs_extra() -> None:
    from mqlab.config.hosts import missing

    if missing():
        raise CliError(missing().replace("[hosts] needs", "mqlab hosts needs"), EXIT_BAD_INPUT)


def cmd_hosts_certs(args: argparse.Namespace) -> int:
    _needs_extra()
    from mqlab.hosts.certs import CertsError, make

    try:
        made = make(args.dir)
    except CertsError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    print(f"made a CA and certificates for scheduler, worker and client in {args.dir}:")
    for p in made:
        print(f"  {p}")
    print(
        "give each host ca.pem and its own pair only (worker.pem, worker-key.pem); keep "
        "ca-key.pem off the hosts: whoever holds it can mint a certificate that runs code on "
        "every worker"
    )
    return 0


def cmd_hosts_check(args: argparse.Namespace) -> int:
    if hostsup.is_inventory(args.profile):
        return hostsup.cmd_check_inventory(args)
    _needs_extra()
    import asyncio

    from mqlab.hosts.certs import CertsError
    from mqlab.hosts.check import check
    from mqlab.hosts.cluster import HostsError

    profile = load(args.profile)
    if profile.hosts is None:
        raise CliError(
            f"{args.profile}: no [hosts] table: the run uses this host only", EXIT_BAD_INPUT
        )
    try:
        found = asyncio.run(check(profile.hosts))
    except CertsError as exc:  # the profile's certificates: bad input, the hosts not tried
        raise CliError(f"{args.profile}: [hosts] certs: {exc}", EXIT_BAD_INPUT) from None
    except HostsError as exc:
        raise CliError(str(exc), EXIT_FAILED) from None
    for h in found:
        o = h.offset
        print(
            f"{h.name} ({', '.join(h.roles)}) at {h.address}: same mqlab; monotonic clock "
            f"{o.offset_ns / 1e9:+.6f} s from this controller's, within {o.bound_ns / 1e3:.1f} µs "
            f"(best round trip of {o.rounds})"
        )
    return 0


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    p = command(
        "hosts", help="the hosts of a multi-host run: certificates, up, down, check",
        description="The server and client workers of a run on other machines, through a Dask "
        "scheduler with TLS (needs pip install \"mqlab[hosts]\"; docs/hosts.md).",
        example="mqlab hosts check profiles/cluster-topologies-hosts.toml",
    )  # fmt: skip
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = helptext.add(
        sub, "certs", help="make a CA and the TLS certificates of a Dask cluster in DIR",
        description="Makes a dedicated CA and the certificates of a Dask scheduler, its "
        "workers and this controller. Give each host ca.pem and its own pair only; keep "
        "ca-key.pem off the hosts.",
        example="mqlab hosts certs ./certs",
    )  # fmt: skip
    c.add_argument("dir", metavar="DIR", help="the directory to make them in")
    c.set_defaults(func=cmd_hosts_certs)
    k = helptext.add(
        sub, "check", help="reach a profile's or an inventory's hosts; same mqlab; clock offsets",
        description="Reaches every host the profile's [hosts] table (or the inventory) names, "
        "checks it runs the same mqlab and plugins, and measures its clock's offset from this "
        "machine's, within a stated bound. Nothing is run.",
        example="mqlab hosts check hosts.toml",
    )  # fmt: skip
    k.add_argument("profile", metavar="PROFILE",
                   help="a profile with a [hosts] table, or an inventory")  # fmt: skip
    k.set_defaults(func=cmd_hosts_check)
    hostsup.add_actions(sub)  # up, down


__all__ = ["add_commands"]
