"""The drain waits for consumers that read again after a fault, not for a queue nobody reads.

A Kafka consumer group whose coordinator's node was killed stops reading for seconds while
its members rejoin: the broker's count of the step's messages then stands still, and a drain
that took two equal readings a tenth of a second apart as "nobody reads any more" ended at
once and left 513 of 900 casts "still queued" that came a few seconds later (a CI run of
tests/test_replicated_kafka.py). The drain's workers here are stand-ins; the broker is a
depth that stands still, then is read again, or never.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from mqlab.measure.account import Depth
from mqlab.run.drain import DRAIN_STILL, drain

SENT, BEFORE = 900, 387


class _Worker:
    """A client or server as the drain reads it: its last report, renewed on each Snap; a
    server reads again ``resumes_s`` after it was made (None: never)."""

    def __init__(
        self, servers: bool, received: int = 0, sent: int = 0, resumes_s: float | None = None
    ) -> None:
        self.spec = SimpleNamespace(servers=[0] if servers else [])
        self.gone = False
        self.done = True
        self.resumes = None if resumes_s is None else time.monotonic() + resumes_s
        # a server that received nothing for the last 5 s of the window
        self.last = SimpleNamespace(
            sent=sent, received=received, at=0, last_rx=time.monotonic_ns() - 5_000_000_000
        )

    async def send(self, _msg: Any) -> None:
        self.last.at = time.monotonic_ns()
        if self.resumes is not None and time.monotonic() >= self.resumes:
            # the group rejoined: every message still queued arrives
            self.last.received, self.last.last_rx, self.resumes = SENT, self.last.at, None


def _drain(server: _Worker, client: _Worker, depth: Any) -> Any:
    return asyncio.run(
        drain(
            [server, client], [client], 1, "m", 30.0, depth,
            cut_short=lambda: False, tick=lambda: None,
        )
    )  # fmt: skip


def test_a_drain_waits_for_consumers_that_read_again_after_a_pause() -> None:
    # the group rejoins 3 s into the drain; until then the broker holds the rest
    server, client = _Worker(True, BEFORE, resumes_s=3.0), _Worker(False, sent=SENT)

    async def depth(_marker: str) -> tuple[Depth, ...]:
        return (Depth("group", SENT - server.last.received),)

    drained = _drain(server, client, depth)
    assert drained.section.drain_end == "complete", drained.section
    assert drained.section.still_queued == 0
    assert 3.0 <= drained.section.drain_s < DRAIN_STILL, drained.section


def test_a_queue_nobody_reads_ends_the_drain_once_its_depth_stood_still() -> None:
    server, client = _Worker(True, BEFORE), _Worker(False, sent=SENT)
    readings = []

    async def depth(_marker: str) -> tuple[Depth, ...]:
        readings.append(time.monotonic())
        return (Depth("group", SENT - BEFORE),)

    drained = _drain(server, client, depth)
    assert drained.section.drain_end == "idle", drained.section
    assert drained.section.still_queued == SENT - BEFORE
    # it stood still for DRAIN_STILL, read about once a second, and no longer than that
    assert DRAIN_STILL <= drained.section.drain_s < DRAIN_STILL + 2, drained.section
    assert len(readings) <= DRAIN_STILL + 2, readings


def test_a_broker_that_holds_nothing_ends_the_drain_at_once() -> None:
    server, client = _Worker(True, BEFORE), _Worker(False, sent=SENT)

    async def depth(_marker: str) -> tuple[Depth, ...]:
        return (Depth("group", 0),)

    drained = _drain(server, client, depth)
    assert drained.section.drain_end == "idle" and drained.section.drain_s < 1.0
