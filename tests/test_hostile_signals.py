"""A second Ctrl-C keeps what was measured (issue 33, class 5).

A second Ctrl-C used to cancel the whole run at once: pressed after a step's window had
closed (while it drained), the step's record was never written and the results file
ended with 0 steps. Now it cuts the waits short (``drain_end: user``) and the step is
written; only a third abandons it. The workers' final figures are still collected.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from mqlab.console.run import ctrl_c
from mqlab.worker.pool import Worker, WorkerPool


def _runner(measured: bool) -> Any:
    return SimpleNamespace(interrupt=asyncio.Event(), force=asyncio.Event(), measured=measured)


async def _presses(measured: bool, n: int) -> tuple[Any, asyncio.Task[None], list[str]]:
    runner = _runner(measured)
    task = asyncio.ensure_future(asyncio.sleep(10))
    said = [ctrl_c(runner, cast("asyncio.Task[Any]", task)) for _ in range(n)]
    await asyncio.sleep(0)
    return runner, task, said


def test_a_second_ctrl_c_after_the_window_keeps_the_step() -> None:
    async def check() -> None:
        runner, task, said = await _presses(measured=True, n=2)
        assert runner.interrupt.is_set() and runner.force.is_set()
        assert not task.cancelled(), "the measured step is still being written"
        assert "writing the measured step" in said[1]
        task.cancel()

    asyncio.run(check())


def test_a_third_ctrl_c_abandons_it_and_a_second_one_during_the_window_stops_now() -> None:
    async def check() -> None:
        for measured, presses in ((True, 3), (False, 2)):
            _, task, said = await _presses(measured, presses)
            assert task.cancelled(), (measured, said)

    asyncio.run(check())


def test_the_final_figures_are_still_collected_after_a_second_ctrl_c() -> None:
    async def check() -> None:
        force = asyncio.Event()
        force.set()
        pool = WorkerPool(force)
        worker = cast("Worker", SimpleNamespace(final=None, gone=False, send=_noop))

        async def answer() -> None:
            await asyncio.sleep(0.3)  # a worker's final report takes a moment
            worker.final = cast("Any", "figures")

        late = asyncio.ensure_future(answer())
        await pool.finish([worker], timeout=30)
        collected = cast("Any", worker.final)
        await late
        assert collected == "figures"

    asyncio.run(check())


async def _noop(msg: dict[str, Any]) -> None:
    return None
