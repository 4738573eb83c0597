"""A step's fault events as the runner performs them: each at its time, one after another.

One task walks the events in time order: it sleeps until an event's time (or
until the previous event finished, if that took longer), hands the event to its
kind's effector and records what happened in the step's ``events`` (the shape a
rolling update's events have: ``t_s``, ``action``, ``detail``), with how long
the action took and whether it failed. A failed action does not stop the step:
the failure is the figure. After the window, each effector puts back what the
step left broken (a node started, an alarm cleared), so the next step starts
whole; that is recorded too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from mqlab.config.events import FaultEvent
from mqlab.errors import MqlabError

_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Fired:
    """What an action did on another host, and when there, on this controller's clock."""

    detail: str
    at_ns: int  # when the action began there, as this controller's monotonic clock reads
    bound_ns: int  # how far that may be off: the host's clock offset bound (and its drift)


class Effector(Protocol):
    async def fire(self, ev: FaultEvent) -> str | Fired: ...

    async def restore(self) -> str: ...


class Timeline:
    """The events of one step and what became of them."""

    def __init__(self, events: tuple[FaultEvent, ...], effectors: Mapping[str, Effector]) -> None:
        self.planned = events
        self.effectors = effectors
        self.events: list[dict[str, Any]] = []
        self.fired: list[tuple[FaultEvent, float]] = []  # (event, seconds into the window)
        self.current = ""  # the action under way, for the live view
        self._window_start = 0
        self._closed = False

    async def run(self, window_start: int) -> None:
        """Fire every event at its time; cancelled when the window closes."""
        self._window_start = window_start
        for ev in self.planned:
            wait = (window_start + int(ev.at * _NS) - time.monotonic_ns()) / _NS
            if wait > 0:
                await asyncio.sleep(wait)
            if self._closed:
                return  # an event the window closed before is not fired
            await self._fire(ev)

    async def _fire(self, ev: FaultEvent) -> None:
        began = time.monotonic_ns()
        t_s = (began - self._window_start) / _NS
        self.current = ev.label
        self.fired.append((ev, t_s))
        ok = True
        try:
            effector = self.effectors.get(ev.kind)
            if effector is None:  # validation refuses this; a step never fires it blind
                raise MqlabError(f"nothing in this step can perform {ev.kind} actions")
            done = await effector.fire(ev)
        except (MqlabError, OSError) as exc:
            ok, done = False, f"failed: {exc}"
        except Exception as exc:  # noqa: BLE001 - an action's failure is a figure, not a crash
            ok, done = False, f"failed: {type(exc).__name__}: {exc}"
        self.current = ""
        where: dict[str, Any] = {}
        detail = done
        if isinstance(done, Fired):  # on another host: when it began there, ± its clock
            detail = done.detail
            t_s = (done.at_ns - self._window_start) / _NS
            self.fired[-1] = (ev, t_s)
            where = {"t_bound_ms": round(done.bound_ns / 1e6, 3)}
        self.events.append({
            "t_s": round(t_s, 3),
            "action": ev.action,
            "detail": f"{ev.label}: {detail}",
            "kind": ev.kind,
            "planned_s": ev.at,
            "took_s": round((time.monotonic_ns() - began) / _NS, 3),
            "ok": ok,
            **where,
        })  # fmt: skip

    async def close(self, firing: asyncio.Task[None]) -> None:
        """The window closed: no further event; one under way finishes (each is bounded)."""
        self._closed = True
        if not self.current:
            firing.cancel()
        await asyncio.gather(firing, return_exceptions=True)

    async def restore(self) -> None:
        """After the window: what the step left broken is put back, and recorded."""
        for kind in dict.fromkeys(ev.kind for ev, _ in self.fired):
            began = time.monotonic_ns()
            if kind not in self.effectors:
                continue
            try:
                detail = await self.effectors[kind].restore()
            except (MqlabError, OSError) as exc:
                detail = f"failed: {exc}"
            if detail:
                self.events.append({
                    "t_s": round((began - self._window_start) / _NS, 3),
                    "action": "restore",
                    "detail": f"after the window ({kind}): {detail}",
                    "kind": kind,
                    "took_s": round((time.monotonic_ns() - began) / _NS, 3),
                    "ok": not detail.startswith("failed"),
                })  # fmt: skip

    def phase_text(self) -> str:
        """The live view's line: the action under way, or the last one and what is next."""
        if self.current:
            return f"{self.current}…"
        done = len(self.fired)
        last = f"after {self.fired[-1][0].label}" if done else "before the first event"
        nxt = (
            f", next {self.planned[done].label} at {self.planned[done].at:g} s"
            if done < len(self.planned)
            else ""
        )
        return f"{last}{nxt}"

    def phases(self, window_s: float) -> list[dict[str, Any]]:
        """before, then one phase per fired event (until the next one or the window's end)."""
        starts = [min(t, window_s) for _, t in self.fired]
        names = ["before", *(f"{ev.label}" for ev, _ in self.fired)]
        bounds = [0.0, *starts, window_s]
        return [
            {"name": n, "start_s": round(a, 3), "end_s": round(b, 3)}
            for n, a, b in zip(names, bounds, bounds[1:], strict=False)
        ]
