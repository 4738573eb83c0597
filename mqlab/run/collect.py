"""A step's figures gathered from its workers: counts from the ledgers, a rolling update's
events and phases.

What the runner hands :mod:`mqlab.run.stepresult` once a step (or, live, a snapshot of
it) is over; no arithmetic on the figures themselves happens here (CPU: :mod:`mqlab.run.cpu`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from mqlab.config.plan import Step
from mqlab.measure.figures import WorkerFigures
from mqlab.measure.ledger import count_ledgers, sent_at_least
from mqlab.record.events import Event, Phase
from mqlab.record.wire import from_wire
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
        "events": tuple(from_wire(Event, e) for e in roll.events),
        "phases": tuple(from_wire(Phase, p) for p in roll.phases(window_s)),
        "update": label,
    }
