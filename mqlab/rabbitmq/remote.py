"""A managed RabbitMQ node on a broker host, as its Dask worker holds it.

The controller ships these functions to the broker host's Dask worker (``Client.run``):
they run on that worker's event loop and keep, per run, the keeper process
(:mod:`mqlab.rabbitmq.keeper`) that holds the node. The keeper's stdin is a pipe from this
worker: when the worker stops or dies, the keeper stops the node. So nothing here is
ever left running by a controller or a worker that went away, and nothing blocks the
worker's loop (its heartbeats to the scheduler go on while a node boots).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

__all__ = ["KEEPER_LIMIT", "call", "start", "stop"]

#: how long a keeper may take to answer one order (a node's start is the longest: 90 s)
KEEPER_LIMIT = 120.0


@dataclass
class _Keeper:
    proc: asyncio.subprocess.Process
    state_dir: str
    answers: dict[int, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    ids: itertools.count[int] = field(default_factory=itertools.count)
    reader: asyncio.Task[None] | None = None


#: run id -> its keeper, in this Dask worker's process
_KEEPERS: dict[str, _Keeper] = {}


async def _read(k: _Keeper) -> None:
    assert k.proc.stdout is not None
    while line := await k.proc.stdout.readline():
        with contextlib.suppress(ValueError, KeyError, TypeError):
            said = json.loads(line)
            answer = k.answers.pop(int(said["id"]), None)
            if answer is not None and not answer.done():
                answer.set_result(said)
    for answer in k.answers.values():  # the keeper is gone: nothing more will come
        if not answer.done():
            answer.set_result({"error": "the broker host's keeper process exited"})


async def _order(k: _Keeper, order: dict[str, Any]) -> dict[str, Any]:
    assert k.proc.stdin is not None
    n = next(k.ids)
    answer = k.answers[n] = asyncio.get_running_loop().create_future()
    k.proc.stdin.write((json.dumps({**order, "id": n}) + "\n").encode())
    await k.proc.stdin.drain()
    try:
        return await asyncio.wait_for(answer, KEEPER_LIMIT)
    except TimeoutError:
        return {"error": f"the keeper did not answer {order.get('op')} within {KEEPER_LIMIT:g}s"}
    finally:
        k.answers.pop(n, None)


async def start(run_id: str, address: str, nodes: int = 1) -> dict[str, Any]:
    """Start a keeper for ``run_id`` and its nodes, listening on ``address``; what the
    keeper answered (``nodes``, ``facts``; or ``error``)."""
    if run_id in _KEEPERS:
        return {"error": f"run {run_id} already has a broker on this host"}
    state_dir = tempfile.mkdtemp(prefix=f"mqlab-broker-{run_id}-")
    with open(os.path.join(state_dir, "keeper.log"), "wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mqlab.rabbitmq.keeper", state_dir,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log,
            start_new_session=True,  # a signal to the worker's group is not the keeper's
        )  # fmt: skip
    k = _KEEPERS[run_id] = _Keeper(proc, state_dir)
    k.reader = asyncio.ensure_future(_read(k))
    said = await _order(k, {"op": "start", "address": address, "nodes": nodes})
    if "error" in said:
        await stop(run_id)
    return said


async def call(run_id: str, order: dict[str, Any]) -> dict[str, Any]:
    """One order to ``run_id``'s keeper (see :mod:`mqlab.rabbitmq.keeper`) and its answer."""
    k = _KEEPERS.get(run_id)
    if k is None or k.proc.returncode is not None:
        return {"error": "no broker of this run runs on this host (its keeper is gone)"}
    return await _order(k, order)


async def stop(run_id: str, timeout: float = 60.0) -> str:
    """Close the keeper's stdin (it stops its nodes and exits); SIGKILL after ``timeout``."""
    k = _KEEPERS.pop(run_id, None)
    if k is None:
        return "nothing to stop"
    assert k.proc.stdin is not None
    k.proc.stdin.close()
    try:
        await asyncio.wait_for(k.proc.wait(), timeout)
        said = "stopped"
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            k.proc.kill()
        await k.proc.wait()
        said = f"killed after {timeout:g}s"
    if k.reader is not None:
        await asyncio.gather(k.reader, return_exceptions=True)
    return said
