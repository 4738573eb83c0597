"""A step's figures gathered from its workers: counts from the ledgers, CPU by role.

What the runner hands :mod:`mqlab.run.stepresult` once a step (or, live, a snapshot of
it) is over; no arithmetic on the figures themselves happens here.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from mqlab.config.plan import Step
from mqlab.measure.figures import WorkerFigures
from mqlab.measure.ledger import count_ledgers, sent_at_least
from mqlab.worker.pool import Worker

if TYPE_CHECKING:
    from mqlab.run.rolling import RollingUpdate


def worker_figures(
    workers: list[Worker], tmp: str | None, live: bool
) -> tuple[WorkerFigures, WorkerFigures, int | None, int]:
    """(clients' figures, servers' figures, unique receipts, cross-worker duplicates)."""
    # by role, not by name: a rolling update's successors count for the same side
    figs_c = WorkerFigures.total(w.last for w in workers if w.spec.clients)
    figs_s = WorkerFigures.total(w.last for w in workers if w.spec.servers)
    if any(w.spec.role == "both" for w in workers):
        figs_s = figs_c  # in-process: one worker holds both sides
    unique: int | None = None
    cross = 0
    if tmp is not None and not live:
        # clients that never sent their final figures (killed on purpose or crashed):
        # their sends are at least what the servers' ledgers prove
        short = {role.client_id for w in workers if w.final is None for role in w.spec.clients}
        if short:
            floor = sent_at_least(tmp, figs_c.sent_by_client, short)
            extra = sum(floor.values()) - sum(figs_c.sent_by_client.values())
            figs_c = dataclasses.replace(figs_c, sent=figs_c.sent + extra, sent_by_client=floor)
        unique, cross = count_ledgers(tmp, figs_c.sent_by_client)
    return figs_c, figs_s, unique, cross


def cpu_figures(
    workers: list[Worker],
    broker: list[float],
    broker_process: dict[str, Any] | None,
    live: bool,
) -> dict[str, Any]:
    """CPU per worker and by role, and the broker's: the window's mean, or live the last."""
    cpu_workers: list[dict[str, Any]] = [
        {
            "worker": w.spec.worker,
            "role": w.spec.role,
            "cpu_percent": round(sum(w.cpu) / len(w.cpu), 1) if w.cpu else None,
            "peak_rss_mb": round(w.peak_rss / 2**20, 1),
            **worker_times(w),
        }
        for w in workers
    ]

    def role_cpu(roles: set[str], last: bool) -> float | None:
        vals = [
            (w.cpu[-1] if last else c["cpu_percent"]) if w.cpu else None
            for w, c in zip(workers, cpu_workers, strict=True)
            if w.spec.role in roles
        ]
        known = [v for v in vals if v is not None]
        return round(sum(known), 1) if known else None

    def role_times(roles: set[str]) -> dict[str, float] | None:
        mine = [c for w, c in zip(workers, cpu_workers, strict=True) if w.spec.role in roles]
        if not mine or any("real_s" not in c for c in mine):
            return None
        # real: the longest worker's (they share one window); user and sys: summed
        return {
            "real_s": max(c["real_s"] for c in mine),
            "user_s": round(sum(c["user_s"] for c in mine), 3),
            "sys_s": round(sum(c["sys_s"] for c in mine), 3),
        }

    return {
        "clients_times": role_times({"client", "both"}),
        "servers_times": role_times({"server"}),
        "clients_percent": role_cpu({"client", "both"}, live),
        "servers_percent": role_cpu({"server"}, live),
        "broker_percent": (
            (broker[-1] if live else round(sum(broker) / len(broker), 1)) if broker else None
        ),
        "broker_process": broker_process,
        "samples": len(broker) if broker else max((len(w.cpu) for w in workers), default=0),
        "workers": cpu_workers,
    }


def worker_times(w: Worker) -> dict[str, float]:
    """A worker's real, user and sys seconds over the window, as seed 002's table gives
    them, from the process's own counters at its first and last sample; {} if unsampled."""
    if w.times_first is None or w.times_last is None or w.times_last is w.times_first:
        return {}
    (t0, u0, s0), (t1, u1, s1) = w.times_first, w.times_last
    return {
        "real_s": round(t1 - t0, 3),
        "user_s": round(u1 - u0, 3),
        "sys_s": round(s1 - s0, 3),
    }


def rolling_fields(roll: RollingUpdate | None, step: Step, window_s: float) -> dict[str, Any]:
    """A rolling update's events, phases and one-line label, for the step's record."""
    if roll is None or step.rolling_to is None or not window_s:
        return {}
    r = roll.rolling
    parts = roll.roles
    first, second = ("clients", "servers") if r.order == "clients-first" else ("servers", "clients")
    how = "interleaved" if r.order == "interleaved" else "then"

    def n(role: str) -> str:  # "1 client", "3 servers"
        return f"{parts[role]} {role if parts[role] != 1 else role[:-1]}"

    label = f"{r.old} -> {r.new}, {n(first)} {how} {n(second)}, {r.stop}"
    return {
        "events": tuple(roll.events),
        "phases": tuple(roll.phases(window_s)),
        "update": label,
    }
