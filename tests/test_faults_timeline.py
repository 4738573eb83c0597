"""The timeline fires each event at its time, in order, and records what became of it: a
failed action is a figure, not the end of the step; an event the window closed before never
fires (issue 13)."""

from __future__ import annotations

import asyncio
import time

from mqlab.config.events import FaultEvent
from mqlab.errors import MqlabError
from mqlab.faults.timeline import Timeline


class Recording:
    def __init__(self) -> None:
        self.fired: list[tuple[str, float]] = []
        self.restored = 0

    async def fire(self, ev: FaultEvent) -> str:
        self.fired.append((ev.action, time.monotonic()))
        if ev.action == "stop_node":
            raise MqlabError("the node would not stop")
        return "done"

    async def restore(self) -> str:
        self.restored += 1
        return "node2 started"


def test_events_fire_at_their_times_and_a_failure_does_not_stop_the_rest() -> None:
    eff = Recording()
    events = (
        FaultEvent(0.2, "stop_node", "node2"),
        FaultEvent(0.5, "kill_node", "node2"),
        FaultEvent(30.0, "start_node", "node2"),  # after the window: never fired
    )
    tl = Timeline(events, {"broker": eff})

    async def window() -> float:
        start = time.monotonic_ns()
        firing = asyncio.create_task(tl.run(start))
        await asyncio.sleep(1.5)
        await tl.close(firing)
        await tl.restore()
        return start / 1e9

    start = asyncio.run(window())
    assert [a for a, _ in eff.fired] == ["stop_node", "kill_node"]
    for (_, at), planned in zip(eff.fired, (0.2, 0.5), strict=True):
        assert planned <= at - start < planned + 0.5  # never early; late only by load
    stop, kill, restore = tl.events
    assert (stop["ok"], stop["detail"]) == (
        False,
        "stop_node node2: failed: the node would not stop",
    )
    assert kill["ok"] and kill["detail"] == "kill_node node2: done"
    assert restore["action"] == "restore" and "node2 started" in restore["detail"]
    assert [p["name"] for p in tl.phases(1.5)] == ["before", "stop_node node2", "kill_node node2"]
