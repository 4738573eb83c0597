"""The hosts stage of a step: what a ``[hosts]`` run adds to the step's record.

Each host's clock before and after the step and its CPU over the window; each host lost
during it (an event of the step, like an injected one); how far a one-way latency between
two hosts can be trusted (``clock_bound``); and a lost host's share: what its last shipped
ledger state proves received counts as received (already in the step's ledgers), what it
may have received after that state and before it died is unknown: the step's account
(:mod:`mqlab.measure.account`) puts it in ``unaccounted``, never in ``lost``, and this
stage says how many.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mqlab.config.cores import ROLES
from mqlab.config.hosts import Hosts as HostsConfig
from mqlab.hosts import clock
from mqlab.measure.account import HostLost
from mqlab.record.figures import Figures
from mqlab.record.sections import Clock, HostEvent, HostFigures, Hosts, HostsSection
from mqlab.record.values import Flag

__all__ = ["hosts_stage", "lost_hosts"]


def _clock(offset: clock.Offset | None) -> Clock | None:
    if offset is None:
        return None
    r = offset.as_record()
    return Clock(offset_s=r["offset_s"], bound_us=r["bound_us"], rounds=r["rounds"])


def hosts_stage(
    states: Sequence[Any],
    config: HostsConfig,
    after: Mapping[str, clock.Offset | None],
    lost_events: Sequence[Mapping[str, Any]],
    step: Sequence[Any],
    receipts_at: Mapping[str, int | None],
    figures: Figures,
    pattern: str,
    window_start: int,
    unknown: Mapping[str, int],
) -> tuple[HostsSection, tuple[Flag, ...]]:
    """The step's ``hosts`` and ``incomplete``, and the flags they raise (``host_lost``,
    ``clock_bound``); ``states``: each host's state in the pool, ``step``: the step's
    workers on them, reaped or not; ``unknown``: what the account left unaccounted for
    each lost host."""
    hosts = []
    for state in states:
        pins = config.placement.get(state.name)
        hosts.append(HostFigures(
            host=state.name, address=state.address, roles=config.roles(state.name),
            clock_before=_clock(state.before), clock_after=_clock(after.get(state.name)),
            lost=state.lost_at is not None, cpus=state.cpus,
            cpu_percent=round(sum(state.cpu) / len(state.cpu), 1) if state.cpu else None,
            placement={r: getattr(pins, r) for r in ROLES if getattr(pins, r)} if pins else None,
        ))  # fmt: skip
    events = tuple(
        HostEvent(
            t_s=round((e["at_ns"] - window_start) / 1e9, 3) if window_start else None,
            host=e["host"], action="host lost", detail=e["detail"],
        )
        for e in lost_events
    )  # fmt: skip
    bound = _bound(states, config, after)
    flags: list[Flag] = []
    incomplete = None
    as_of: dict[str, float | None] | None = None
    unknown_all: int | None = None
    if events:
        as_of, unknown_all, incomplete, flag = _lost_share(
            events, step, receipts_at, unknown, window_start
        )
        flags.append(flag)
    p50 = figures.latency_ms.p50
    if (
        pattern in ("cast", "notify")
        and bound is not None
        and (p50 is None or bound / 1000 > p50 / 10)
    ):
        flags.append(Flag(code="clock_bound", message=(
            f"one-way latency spans two hosts and their clocks are known to ±{bound:.0f} µs, "
            "more than a tenth of its p50: below that the figure cannot be resolved"
        )))  # fmt: skip
    section = HostsSection(
        hosts=Hosts(
            hosts=tuple(hosts), events=events, latency_bound_us=bound,
            receipts_as_of_s=as_of, unknown=unknown_all,
        ),
        incomplete=incomplete,
    )  # fmt: skip
    return section, tuple(flags)


def lost_hosts(
    events: Sequence[Mapping[str, Any]], step: Sequence[Any], receipts_at: Mapping[str, int | None]
) -> tuple[HostLost, ...]:
    """Each host lost during the step as the accountant reads it: the delivery groups its
    servers served, when its last shipped ledger state was read, when it was lost."""
    out = []
    for e in events:
        host = e["host"]
        groups = frozenset(r.group for w in step if w.host == host for r in w.spec.servers)
        if groups:
            out.append(HostLost(host, groups, receipts_at.get(host), int(e["at_ns"])))
    return tuple(out)


def _lost_share(
    events: Sequence[HostEvent],
    step: Sequence[Any],
    receipts_at: Mapping[str, int | None],
    unknown_by_host: Mapping[str, int],
    window_start: int,
) -> tuple[dict[str, float | None], int, tuple[str, ...], Flag]:
    """A lost host's share (see the module doc): when its receipts count up to, how many
    are unknown, which figures are incomplete, and the flag saying it."""
    lost = {e.host for e in events}
    roles = {w.spec.role for w in step if w.host in lost}
    unknown = 0
    as_of: dict[str, float | None] = {}
    for host in sorted(lost):
        if not any(w.host == host and w.spec.servers for w in step):
            continue
        at = receipts_at.get(host)
        as_of[host] = round((at - window_start) / 1e9, 3) if at and window_start else None
        unknown += unknown_by_host.get(host, 0)
    names = ", ".join(sorted(lost))
    said = []
    if as_of:
        said.append(
            "its receipts count up to its last shipped ledger state ("
            + ", ".join(f"{h}: {'none' if t is None else f'{t:g} s'}" for h, t in as_of.items())
            + f"), {unknown:,} sent around its loss are unknown (unaccounted, not lost)"
        )
    if "client" in roles:
        said.append("its clients' sends after their last report count only where a "
                    "server's receipt proves them")  # fmt: skip
    flag = Flag(code="host_lost", message=(
        f"host {names} lost during the step: its workers' figures end at their last "
        f"report; {'; '.join(said)}"
    ))  # fmt: skip
    incomplete = ["throughput", "latency", "lost"]
    if "server" in roles:
        incomplete += ["received", "duplicates"]
    if "client" in roles:
        incomplete += ["sent"]
    return as_of, unknown, tuple(incomplete), flag


def _bound(
    states: Sequence[Any], config: HostsConfig, after: Mapping[str, clock.Offset | None]
) -> float | None:
    """A one-way latency from a client host to a server host is wrong by at most the two
    offsets' bounds added, and by how far the offsets drifted over the step."""
    before = {s.name: s.before for s in states}
    worst: float | None = None
    for s in config.servers:
        for c in config.clients:
            if s == c:
                continue
            parts: list[int] = []
            for h in (s, c):
                b, a = before.get(h), after.get(h)
                if b is None:
                    parts = []
                    break
                drift = abs(a.offset_ns - b.offset_ns) if a is not None else 0
                parts.append(b.bound_ns + drift)
            if parts:
                total = sum(parts) / 1e3
                worst = total if worst is None else max(worst, total)
    return round(worst, 1) if worst is not None else None
