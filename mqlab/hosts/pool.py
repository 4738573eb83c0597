"""Workers on other hosts: the runner's worker pool, through one supervisor per host.

The same interface as :class:`mqlab.worker.pool.WorkerPool` (spawn, ready, figures in,
finish, reap, CPU each second), so the runner cannot tell the two apart, and each
worker is the same process speaking the same frames; only the path differs: a frame to
a worker goes through the host's Dask queue to its supervisor
(:mod:`mqlab.hosts.supervisor`), and back. Around each step the pool measures every
host's clock (before: the offset each worker's clock is shifted by; after: the drift)
and ships the servers' receipt ledgers back into the step's directory, where they are
counted as if they had been written here.

A host whose Dask worker dies (its supervisor task fails: ``allowed-failures = 0``
reports it at once, never runs it elsewhere) is an event of the step: its workers are
gone, and its ledgers with them, but its supervisor shipped their state once a second:
the last one counts as the host's receipts, what it may have received after that is
unaccounted (not lost), and the step says which figures are incomplete. The broker host
(``[hosts] brokers``) runs a supervisor too, for its CPU and its loss: that one ends the run
(:attr:`failure`), its node having gone with it.

For faults, rolling updates and placement the pool also kills a worker on its host, starts a
successor on a given host, reroutes a host's new workers through its fault proxies, pins each
role to its CPUs there and reads them back, and runs a function in a load host's Dask worker
(:meth:`on_host`, for :mod:`mqlab.faults.hostlinks`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import os
import time
import zlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from distributed import Client, Queue
from distributed.scheduler import KilledWorker

from mqlab.config.hosts import Hosts
from mqlab.config.plan import WorkerSpec
from mqlab.hosts import clock, section
from mqlab.hosts.cluster import HostsError, check_placement, connect, worker_addresses
from mqlab.hosts.state import HostState, RemoteWorker
from mqlab.hosts.supervisor import queue_names, supervise
from mqlab.measure.account import HostLost
from mqlab.record.figures import Figures
from mqlab.record.sections import HostsSection
from mqlab.record.values import Flag
from mqlab.worker import protocol
from mqlab.worker.pool import Worker, WorkerPool

__all__ = ["HostPool", "RemoteWorker"]

#: a supervisor must say hello within this many seconds of being submitted
START_LIMIT = 30.0
#: a host must answer a reap or a ledger request within this many seconds (beyond the grace)
ANSWER_LIMIT = 15.0
#: the longest one blocking get on a host's up queue waits before it is asked again
_WAIT = 0.25


class HostPool(WorkerPool):
    """The runner's workers on the hosts a profile's ``[hosts]`` names (see the module doc)."""

    def __init__(self, force: asyncio.Event, hosts: Hosts, run_id: str) -> None:
        super().__init__(force)
        self.hosts = hosts
        self.run_id = run_id
        self._client: Client | None = None
        self._connection: contextlib.AbstractAsyncContextManager[Client] | None = None
        self._state: dict[str, HostState] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._turn = {
            "server": itertools.cycle(hosts.servers),
            "client": itertools.cycle(hosts.clients),
        }
        self._events: list[dict[str, Any]] = []  # hosts lost during the current step
        self._step: list[RemoteWorker] = []  # the current step's workers, reaped or not
        #: a lost host -> when (controller ns) its last shipped ledger state was read
        self._receipts_at: dict[str, int | None] = {}

    # -- the cluster -------------------------------------------------------------

    async def open(self) -> None:
        self._connection = connect(self.hosts)
        self._client = client = await self._connection.__aenter__()
        addrs = await worker_addresses(client, self.hosts, self.hosts.no_workers_timeout)
        await asyncio.wait_for(clock.install(client, list(addrs.values())), ANSWER_LIMIT)
        await check_placement(client, self.hosts, addrs)
        for name, addr in addrs.items():
            down_name, up_name = queue_names(self.run_id, name)
            # an asynchronous client's queue exists once awaited: a put before is lost
            down = await Queue(down_name, client=client)  # type: ignore[no-untyped-call]
            up = await Queue(up_name, client=client)  # type: ignore[no-untyped-call]
            state = HostState(name, addr, down, up)
            self._state[name] = state
            state.future = client.submit(
                supervise, self.run_id, name, key=f"mqlab-supervise-{self.run_id}-{name}",
                workers=[name], allow_other_workers=False, pure=False,
            )  # fmt: skip
            self._tasks += [
                asyncio.create_task(self._pump(state)),
                asyncio.create_task(self._watch(state)),
            ]
        waits = [asyncio.ensure_future(s.hello.wait()) for s in self._state.values()]
        _, pending = await asyncio.wait(waits, timeout=START_LIMIT)
        for w in pending:
            w.cancel()
        late = [s.name for s in self._state.values() if not s.hello.is_set()]
        if late:
            why = "; ".join(f"{s.name}: {s.lost_why}" for s in self._state.values() if s.lost_why)
            raise HostsError(
                f"the supervisor on {', '.join(late)} did not start within {START_LIMIT:g}s"
                + (f" ({why})" if why else "")
            )

    async def close(self) -> None:
        try:
            await self.reap(list(self._workers.values()))
            for state in self._state.values():
                state.orders.put_nowait({"op": "stop"})
            live = [s.future for s in self._state.values() if s.future and s.lost_at is None]
            if live and self._client is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._client.gather(live, errors="skip"), 10)  # type: ignore[no-untyped-call]
        finally:
            for t in self._tasks:
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            if self._connection is not None:
                await self._connection.__aexit__(None, None, None)

    async def _pump(self, state: HostState) -> None:
        """Orders down, answers up, a ping each second: the host's half of the relay."""
        try:
            await self._relay(state)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the scheduler gone: the host is lost to us
            self._host_lost(state, f"relay failed: {type(exc).__name__}: {str(exc)[:160]}")

    async def _relay(self, state: HostState) -> None:
        # two directions, each blocked on its own queue: an order goes down and an answer
        # comes up as soon as it is there (polling both from one loop cost 50 ms each way)
        tasks = [
            asyncio.ensure_future(self._downward(state)),
            asyncio.ensure_future(self._upward(state)),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for t in done:
                t.result()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _downward(self, state: HostState) -> None:
        """Orders down as they come, and a ping each second."""
        loop = asyncio.get_running_loop()
        next_ping = loop.time()
        while state.lost_at is None:
            batch = []
            with contextlib.suppress(TimeoutError):
                wait = max(0.0, next_ping - loop.time())
                batch.append(await asyncio.wait_for(state.orders.get(), wait))
            while not state.orders.empty():
                batch.append(state.orders.get_nowait())
            if loop.time() >= next_ping:
                batch.append({"op": "ping"})
                next_ping = loop.time() + 1.0
            for order in batch:
                await asyncio.wait_for(state.down.put(order), ANSWER_LIMIT)

    async def _upward(self, state: HostState) -> None:
        """What the host says, as it comes; nothing, not even an empty answer, for
        ANSWER_LIMIT s is the scheduler gone."""
        loop = asyncio.get_running_loop()
        while state.lost_at is None:
            asked = loop.time()
            try:
                first = await asyncio.wait_for(state.up.get(timeout=_WAIT), ANSWER_LIMIT)
            except TimeoutError:
                if loop.time() - asked >= ANSWER_LIMIT:
                    raise
                continue  # the queue's own wait ran out: nothing said
            items = [first, *await asyncio.wait_for(state.up.get(batch=True), ANSWER_LIMIT)]
            for item in items:
                self._answer(state, item)

    async def _watch(self, state: HostState) -> None:
        """The supervisor task's end: a failure is the host lost."""
        assert state.future is not None
        try:
            await cast(Awaitable[Any], state.future)
            why = "its supervisor ended"
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - KilledWorker and the like: the host is gone
            why = f"{type(exc).__name__}: {str(exc)[:160]}"
            if isinstance(exc, KilledWorker):  # its words are about retries, not the host
                why = "its Dask worker died (the scheduler: KilledWorker)"
        self._host_lost(state, why)

    def _host_lost(self, state: HostState, why: str) -> None:
        if state.lost_at is not None:
            return
        state.lost_at = time.monotonic_ns()
        state.lost_why = why
        if state.name in self.hosts.brokers and not self.failure:
            # its node went with it (its keeper stops it): the run cannot go on
            self.failure = (
                f"broker host {state.name} ({state.address}) lost: {why}; its RabbitMQ node "
                "is stopped with it"
            )
        self._events.append({"at_ns": state.lost_at, "host": state.name, "detail": why})
        for w in self._workers.values():
            if isinstance(w, RemoteWorker) and w.host == state.name:
                self.lost(w, f"host {state.name} lost ({why})")
        for answer in state.answers.values():
            if not answer.done():
                answer.set_result({})

    def _answer(self, state: HostState, item: dict[str, Any]) -> None:
        op = item["op"]
        w = self._workers.get(item.get("w", ""))
        if op == "hello":
            state.hello.set()
        elif op == "w" and w is not None:
            try:
                self.receive(w, protocol.decode(item["b"]))
            except protocol.FrameError as exc:  # what the local pool does: the worker is lost
                self.lost(w, f"worker {w.spec.worker}: {exc}")
        elif op == "gone" and w is not None:
            w.gone = True
        elif op == "exited" and w is not None:
            self.lost(w, item.get("tail") or f"worker {w.spec.worker} exited ({item['code']})")
        elif op == "cpu":
            state.cpu_now, state.cpus = item.get("host"), item.get("cpus")
            for name, (cpu, rss) in item["v"].items():
                rw = self._workers.get(name)
                if isinstance(rw, RemoteWorker):
                    rw.cpu_now, rw.rss = cpu, rss
                    rw.peak_rss = max(rw.peak_rss, rss)
        elif op == "ledger-state":
            # the host's clock onto the controller's: its workers were shifted by this offset
            at = item["at"] - (state.before.offset_ns if state.before is not None else 0)
            _, files = state.receipts.get(item["dir"], (0, {}))
            state.receipts[item["dir"]] = (at, {**files, **item["files"]})
        elif op in ("reaped", "ledgers", "killed", "cores"):
            key = {"ledgers": f"ledgers:{item.get('dir')}", "killed": f"killed:{item.get('w')}"}
            key = key.get(op, op)
            answer = state.answers.get(key)
            if answer is not None and not answer.done():
                answer.set_result(item)

    async def _ask(self, state: HostState, key: str, order: dict[str, Any], limit: float) -> Any:
        """An order whose answer the pool waits for, up to ``limit`` s or the host's loss."""
        if state.lost_at is not None:
            return {}
        answer = state.answers[key] = asyncio.get_running_loop().create_future()
        state.orders.put_nowait(order)
        try:
            return await asyncio.wait_for(answer, limit)
        except TimeoutError:
            return {}
        finally:
            state.answers.pop(key, None)

    # -- the WorkerPool interface --------------------------------------------------

    async def spawn(
        self, specs: tuple[WorkerSpec, ...], tmp: str, where: Worker | str | None = None
    ) -> list[Worker]:
        started: list[Worker] = []
        loop = asyncio.get_running_loop()
        by_host: dict[str, list[dict[str, Any]]] = {}
        for spec in specs:
            host = (
                where if isinstance(where, str)
                else where.host if isinstance(where, RemoteWorker)
                else next(self._turn["server" if spec.role == "server" else "client"])
            )  # fmt: skip
            state = self._state[host]
            offset = state.before.offset_ns if state.before is not None else 0
            spec = dataclasses.replace(spec, clock_offset_ns=offset)
            w = RemoteWorker(spec, ready=loop.create_future(), host=host, orders=state.orders)
            self._workers[spec.worker] = w
            self._step.append(w)
            if state.lost_at is not None:
                self.lost(w, f"host {host} lost ({state.lost_why})")
            by_host.setdefault(host, []).append(spec.to_wire())
            started.append(w)
        for host, dicts in by_host.items():
            state = self._state[host]
            pins = self.hosts.placement.get(host)
            cpus = {r: list(pins.of(r)) for r in ("server", "client", "both")} if pins else {}
            state.orders.put_nowait({
                "op": "spawn", "specs": dicts, "urls": state.urls, "netns": state.netns,
                "cpus": cpus,
            })  # fmt: skip
        return started

    async def kill(self, w: Worker) -> str:
        if not isinstance(w, RemoteWorker):
            return await super().kill(w)
        said = await self._ask(
            self._state[w.host], f"killed:{w.spec.worker}",
            {"op": "kill", "w": w.spec.worker}, ANSWER_LIMIT,
        )  # fmt: skip
        w.gone = True  # its channel ends with it: no word of it is waited for
        return str(said.get("said") or f"{w.spec.worker}: host {w.host} did not answer")

    async def readback(
        self, workers: list[Worker], broker_pids: tuple[int, ...]
    ) -> list[dict[str, Any]]:
        """Each host's workers' CPUs, read back there, each entry naming its host."""
        by_host: dict[str, list[str]] = {}
        for w in workers:
            if isinstance(w, RemoteWorker) and w.running:
                by_host.setdefault(w.host, []).append(w.spec.worker)
        out: list[dict[str, Any]] = []
        for host, names in by_host.items():
            said = await self._ask(self._state[host], "cores", {"op": "cores", "ws": names},
                                   ANSWER_LIMIT)  # fmt: skip
            out += [{**one, "host": host} for one in said.get("v") or ()]
        return out

    def load_hosts(self) -> tuple[str, ...]:
        return self.hosts.loads

    async def on_host(self, host: str, fn: Callable[..., Any], *args: Any) -> Any:
        state = self._state[host]
        if state.lost_at is not None or self._client is None:
            raise HostsError(f"host {host} lost ({state.lost_why})")
        try:
            got = await asyncio.wait_for(
                self._client.run(fn, *args, workers=[state.address]), ANSWER_LIMIT * 2
            )
        except Exception as exc:  # noqa: BLE001 - a comm error, a worker gone: one line
            raise HostsError(f"host {host}: {type(exc).__name__}: {str(exc)[:160]}") from None
        return got[state.address]

    def reroute(self, host: str, urls: Mapping[str, str], netns: str | None) -> None:
        state = self._state[host]
        state.urls, state.netns = dict(urls), netns

    def offset(self, host: str) -> tuple[int, int] | None:
        before = self._state[host].before
        return (before.offset_ns, before.bound_ns) if before is not None else None

    async def reap(self, workers: list[Worker], grace: float = 0.0) -> None:
        """Each host stops its workers (killing those that outstay ``grace``), then ships
        the step's ledgers into the step's directory here."""
        by_host: dict[str, list[RemoteWorker]] = {}
        for w in workers:
            if isinstance(w, RemoteWorker):
                by_host.setdefault(w.host, []).append(w)
        asks = []
        for host, ws in by_host.items():
            order = {"op": "reap", "ws": [w.spec.worker for w in ws], "grace": grace}
            asks.append(self._ask(self._state[host], "reaped", order, grace + ANSWER_LIMIT))
        await asyncio.gather(*asks)
        ledgers = []
        for host, ws in by_host.items():
            for d in {w.spec.ledger_dir for w in ws if w.spec.ledger_dir}:
                if os.path.isdir(d):
                    order = {"op": "ledgers", "dir": d}
                    ledgers.append(
                        self._ask(self._state[host], f"ledgers:{d}", order, ANSWER_LIMIT)
                    )
        answers = list(await asyncio.gather(*ledgers))
        for host, ws in by_host.items():
            state = self._state[host]
            for d in {w.spec.ledger_dir for w in ws if w.spec.ledger_dir}:
                at, files = state.receipts.pop(d, (None, {}))
                if state.lost_at is not None:
                    # the host died with its ledgers: what it last shipped proves receipts
                    # up to ``at``; after that its share is unknown (step_end says which)
                    answers.append({"dir": d, "files": files})
                    if at is not None or host not in self._receipts_at:
                        self._receipts_at[host] = at
        for answer in answers:
            for name, data in (answer.get("files") or {}).items():
                if os.path.isdir(answer["dir"]) and "/" not in name and name not in (".", ".."):
                    with open(os.path.join(answer["dir"], name), "wb") as f:
                        f.write(zlib.decompress(data))
        for w in workers:
            self._workers.pop(w.spec.worker, None)

    def sample_cpu(self, workers: list[Worker], measuring: bool) -> None:
        # the broker hosts too: their CPU is the broker's
        hosts = {w.host for w in workers if isinstance(w, RemoteWorker)} | {*self.hosts.brokers}
        for name in hosts:
            state = self._state[name]
            if measuring and state.cpu_now is not None and state.lost_at is None:
                state.cpu.append(state.cpu_now)
        for w in workers:
            if isinstance(w, RemoteWorker) and measuring and w.cpu_now is not None and not w.gone:
                w.cpu.append(w.cpu_now)

    # -- around each step ------------------------------------------------------------

    async def _offsets(self) -> dict[str, clock.Offset | None]:
        assert self._client is not None
        out: dict[str, clock.Offset | None] = {}
        for name, state in self._state.items():
            out[name] = None
            if state.lost_at is None:
                with contextlib.suppress(Exception):
                    out[name] = await asyncio.wait_for(
                        clock.measure(self._client, state.address), ANSWER_LIMIT
                    )
        return out

    async def step_start(self) -> None:
        self._events = []
        self._step = []
        self._receipts_at = {}
        for state in self._state.values():
            state.cpu = []
        for name, off in (await self._offsets()).items():
            self._state[name].before = off

    def lost_hosts(self) -> tuple[HostLost, ...]:
        """The hosts lost during the step, as the accountant reads them."""
        return section.lost_hosts(self._events, self._step, self._receipts_at)

    async def step_end(
        self, figures: Figures, pattern: str, window_start_ns: int, unknown: Mapping[str, int]
    ) -> tuple[HostsSection, tuple[Flag, ...]]:
        """The hosts stage: each host's clock and CPU over the step, a lost host's share."""
        after = await self._offsets()
        return section.hosts_stage(
            list(self._state.values()), self.hosts, after, self._events, self._step,
            self._receipts_at, figures, pattern, window_start_ns, unknown,
        )  # fmt: skip
