"""``mqlab hosts``: the certificates of a TLS Dask cluster, and a profile's hosts checked."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from mqlab.console import hostsup
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
        description="`mqlab hosts certs DIR` makes a dedicated CA and the TLS certificates of a "
        "Dask scheduler, its workers and this controller; `mqlab hosts check PROFILE` reaches the "
        "hosts a profile's [hosts] (or an inventory) names and measures each one's clock offset; "
        "`mqlab hosts up INVENTORY` starts a TLS scheduler and the named Dask workers over SSH, "
        "`mqlab hosts down INVENTORY` stops them.",
    )  # fmt: skip
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = sub.add_parser("certs", help="make a CA and certificates in DIR")
    c.add_argument("dir")
    c.set_defaults(func=cmd_hosts_certs)
    k = sub.add_parser(
        "check", help="reach a profile's or an inventory's hosts; same mqlab; clock offsets"
    )
    k.add_argument("profile", help="a profile with [hosts], or an inventory")
    k.set_defaults(func=cmd_hosts_check)
    hostsup.add_actions(sub)  # up, down


__all__ = ["add_commands"]
