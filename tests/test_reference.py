"""The reference-loop contract's helpers, as a plugin's loop uses them."""

from __future__ import annotations

import asyncio
import threading

import pytest

from mqlab.sdk.reference import Tally, run_until_stopped


async def test_work_runs_until_the_core_stops_it_then_is_cancelled() -> None:
    tally, cancelled = Tally(), asyncio.Event()

    async def forever() -> None:
        try:
            while True:
                tally.n += 1
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    # the core sets `stop` from its sampling thread
    threading.Timer(0.3, lambda: setattr(tally, "stop", True)).start()
    await asyncio.wait_for(run_until_stopped(tally, forever()), 5.0)
    assert tally.n > 0 and cancelled.is_set()


async def test_the_first_error_of_the_work_ends_the_loop_as_itself() -> None:
    tally = Tally()

    async def fails() -> None:
        await asyncio.sleep(0.05)
        raise ConnectionError("nats: the connection closed during the loop")

    async def waits() -> None:
        await asyncio.sleep(60)

    # not an ExceptionGroup: the core's one line names the error, and it comes at once
    with pytest.raises(ConnectionError, match="connection closed during the loop"):
        await asyncio.wait_for(run_until_stopped(tally, fails(), waits()), 5.0)
    assert not tally.stop


async def test_work_inside_a_library_call_when_stopped_finishes_it_before_it_returns() -> None:
    """Before: run_until_stopped cancelled its coroutines at once, inside whatever library
    call they were in (one library hung for good when cancelled inside a transaction)."""
    tally, seen = Tally(), []

    async def transactions() -> None:
        while not tally.stop:
            try:
                await asyncio.sleep(0.3)  # a library call that must not be cut in half
            except asyncio.CancelledError:
                seen.append("cancelled inside a transaction")
                raise
            seen.append("committed")

    threading.Timer(0.45, lambda: setattr(tally, "stop", True)).start()
    await asyncio.wait_for(run_until_stopped(tally, transactions()), 5.0)
    assert seen and set(seen) == {"committed"}, seen
