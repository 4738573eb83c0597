"""Running a plugin's reference loop: two processes, one window, one rate.

The controller (:func:`measure`) starts the consumer process, waits until it
consumes, then starts the publisher; both are given the same window on the
host's monotonic clock (warm-up excluded). In each process a sampling thread
reads the loop's ``Tally`` at the window's start and end and then tells the
loop to stop, so the loop itself pays one integer increment per message.

The ceiling is what the consumer received per second inside the window: the
same definition as a cast step's throughput (deliveries at the server).

Process protocol (JSON lines): the controller writes the spec to the
process's stdin; the consumer answers ``{"ready": peer}`` once it consumes, the publisher
(started then, with that peer) ``{"ready": ""}`` once its library is loaded; the controller
then writes ``{"t0": .., "t1": ..}`` (monotonic seconds) to both; each process ends
with ``{"n0": .., "n1": .., "c0": .., "c1": ..}`` (counts and CPU-seconds at the
window's start and end) or ``{"error": "one line"}`` on stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import json
import signal
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Any

from mqlab.ceiling import share
from mqlab.config.cores import Cores
from mqlab.sdk.reference import ReferenceSpec, Tally, load
from mqlab.worker.affinity import pin

#: seconds a consumer may take to declare and start consuming
READY_LIMIT = 30.0
#: seconds after the window's end a loop may take to stop and report
STOP_LIMIT = 15.0


@dataclass(frozen=True, slots=True)
class Measured:
    """One reference loop's figures over the window."""

    received_per_s: float  # the ceiling: deliveries per second at the consumer
    sent_per_s: float
    seconds: float
    #: each process's CPU per message in the window, µs (its CPU-seconds over its count)
    consumer_cpu_us: float | None = None
    publisher_cpu_us: float | None = None
    #: what the two processes wrote to stderr (tails), for a reader asking why a rate is 0
    stderr: str = ""


class LoopFailed(Exception):
    """The reference loop could not run; the message is one line, and :attr:`stderr` holds
    what its processes wrote there (a traceback's lines, for a plugin author)."""

    def __init__(self, message: str, stderr: str = "") -> None:
        super().__init__(message)
        self.stderr = stderr


#: lines of each process's stderr kept for a failure
STDERR_LINES = 40


# -- the controller ------------------------------------------------------------


async def measure(
    plugin: str,
    spec: ReferenceSpec,
    warmup: float,
    duration: float,
    placement: Cores | None = None,
    publisher_after: float = 0.0,
) -> Measured:
    """Run ``plugin``'s reference loop once; LoopFailed with one line if it cannot.

    With a ``placement``, the consumer runs on the servers' CPUs and the publisher on
    the clients', as the plugin's own workers did. ``publisher_after``: seconds the
    publisher goes on after its consumer stopped (the conformance kit's check that a
    publisher without a consumer still stops); its rate is then over its longer window.
    A loop that does not report in time is LoopFailed with its threads' stacks
    (``faulthandler``) and its stderr in :attr:`LoopFailed.stderr`.
    """
    procs: list[asyncio.subprocess.Process] = []
    try:
        return await _measure(procs, plugin, spec, warmup, duration, placement, publisher_after)
    except LoopFailed as exc:
        for proc in procs:
            await _reap(proc)
        raise LoopFailed(str(exc), exc.stderr or await _stderr(procs)) from None
    finally:
        for proc in procs:
            await _reap(proc)


async def _measure(
    procs: list[asyncio.subprocess.Process],
    plugin: str,
    spec: ReferenceSpec,
    warmup: float,
    duration: float,
    placement: Cores | None = None,
    publisher_after: float = 0.0,
) -> Measured:
    try:
        consumer = await _spawn(procs, "consume", plugin, spec, placement)
        ready = await _line(consumer, READY_LIMIT, "the consumer did not start")
        publisher = await _spawn(procs, "publish", plugin, ReferenceSpec(**{
            **asdict(spec), "peer": str(ready.get("ready", ""))
        }), placement)  # fmt: skip
        # the window opens once the publisher has its library loaded: on a loaded machine
        # importing one (oslo.messaging) took longer than the warm-up and the whole window
        await _line(publisher, READY_LIMIT, "the publisher did not start")
        t0 = time.monotonic() + warmup
        _write(consumer, {"t0": t0, "t1": t0 + duration})
        _write(publisher, {"t0": t0, "t1": t0 + duration + publisher_after})
        budget = warmup + duration + publisher_after + STOP_LIMIT
        got, sent = await asyncio.gather(
            _line(consumer, budget, "the consumer did not report"),
            _line(publisher, budget, "the publisher did not report"),
        )
    finally:
        for proc in procs:
            await _reap(proc)
    return Measured(
        received_per_s=(got["n1"] - got["n0"]) / duration,
        sent_per_s=(sent["n1"] - sent["n0"]) / duration,
        seconds=duration,
        consumer_cpu_us=share.loop_cpu_us(got["c1"] - got["c0"], got["n1"] - got["n0"]),
        publisher_cpu_us=share.loop_cpu_us(sent["c1"] - sent["c0"], sent["n1"] - sent["n0"]),
        stderr=await _stderr(procs),
    )


async def _stderr(procs: list[asyncio.subprocess.Process]) -> str:
    """The tail of each finished process's stderr, headed by its role."""
    out = []
    for role, proc in zip(("consumer", "publisher"), procs, strict=False):
        if proc.stderr is None:
            continue
        try:
            raw = await asyncio.wait_for(proc.stderr.read(), 5)
        except (TimeoutError, ValueError):
            continue
        lines = raw.decode(errors="replace").rstrip().splitlines()[-STDERR_LINES:]
        if lines:
            out.append(f"--- {role} stderr ---\n" + "\n".join(lines))
    return "\n".join(out)


async def _spawn(
    procs: list[asyncio.subprocess.Process],
    role: str,
    plugin: str,
    spec: ReferenceSpec,
    placement: Cores | None = None,
) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mqlab.ceiling.refloop", role,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    procs.append(proc)
    cpus = placement.of("server" if role == "consume" else "client") if placement else ()
    if cpus:
        pin(proc.pid, cpus)
    _write(proc, {"plugin": plugin, **asdict(spec)})
    return proc


def _write(proc: asyncio.subprocess.Process, doc: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(doc).encode() + b"\n")


async def _line(proc: asyncio.subprocess.Process, limit: float, what: str) -> dict[str, Any]:
    assert proc.stdout is not None and proc.stderr is not None
    try:
        raw = await asyncio.wait_for(proc.stdout.readline(), limit)
    except TimeoutError:
        raise LoopFailed(
            f"{what} within {limit:g}s (hung? its threads' stacks follow)", await _stacks(proc)
        ) from None
    if not raw:
        # the process died: its last stderr line says why (a traceback's last line)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 5)
        err = (await proc.stderr.read()).decode(errors="replace").strip().splitlines()
        raise LoopFailed(
            f"{what}: {err[-1] if err else f'exit status {proc.returncode}'}",
            "\n".join(err[-STDERR_LINES:]),
        )
    doc: dict[str, Any] = json.loads(raw)
    if "error" in doc:
        raise LoopFailed(f"{what}: {doc['error']}")
    return doc


async def _stacks(proc: asyncio.subprocess.Process) -> str:
    """A hung loop's threads' stacks (faulthandler, on SIGUSR1) and what else it wrote to
    stderr, once it is killed: where a library call hangs, for a plugin author."""
    assert proc.stderr is not None
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGUSR1)
        await asyncio.sleep(1.0)  # the dump is written from the process's own thread
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    try:
        raw = await asyncio.wait_for(proc.stderr.read(), 5)
    except (TimeoutError, ValueError):
        return ""
    return "\n".join(raw.decode(errors="replace").rstrip().splitlines()[-4 * STDERR_LINES :])


async def _reap(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(proc.wait(), 5)


# -- a loop's process --------------------------------------------------------------


def _emit(doc: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def _sample(tally: Tally, out: dict[str, float]) -> None:
    """Wait for the window, read the count and the process's CPU time (every thread's)
    at its start and end, then stop the loop."""
    try:
        window = json.loads(sys.stdin.readline())
        t0, t1 = float(window["t0"]), float(window["t1"])
        time.sleep(max(0.0, t0 - time.monotonic()))
        out["n0"], out["c0"] = tally.n, time.process_time()
        time.sleep(max(0.0, t1 - time.monotonic()))
        out["n1"], out["c1"] = tally.n, time.process_time()
    except (ValueError, KeyError):
        pass  # the controller went away: stop without figures
    tally.stop = True


def _dump_tasks(signum: int, frame: object) -> None:
    """A hung asyncio loop's coroutines, where each waits (faulthandler's stacks show the
    event loop's thread idle in its selector, not the coroutine that never returns)."""
    with contextlib.suppress(RuntimeError):  # no loop running: the thread stacks say it all
        for task in asyncio.all_tasks(asyncio.get_running_loop()):
            print(f"asyncio task {task.get_name()} (most recent call last):", file=sys.stderr)
            awaiting: Any = task.get_coro()
            while awaiting is not None:  # down the chain of awaits to where it waits
                frame = getattr(awaiting, "cr_frame", None) or getattr(awaiting, "gi_frame", None)
                if frame is not None:
                    code = frame.f_code
                    print(f'  File "{code.co_filename}", line {frame.f_lineno} in '
                          f"{code.co_name}", file=sys.stderr)  # fmt: skip
                awaiting = getattr(awaiting, "cr_await", None) or getattr(
                    awaiting, "gi_yieldfrom", None
                )


def main(role: str) -> int:
    # a loop that hangs is asked where (SIGUSR1) before it is killed: every thread's stack
    # (faulthandler, even inside a blocking library call), then its asyncio tasks' (if any)
    signal.signal(signal.SIGUSR1, _dump_tasks)
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=True)
    doc = json.loads(sys.stdin.readline())
    plugin = doc.pop("plugin")
    doc["urls"] = tuple(doc["urls"])
    spec = ReferenceSpec(**doc)
    tally = Tally()
    out: dict[str, float] = {}
    sampler = threading.Thread(target=_sample, args=(tally, out), daemon=True)
    try:
        loop = load(plugin)(spec)
        if role == "consume":

            def ready(peer: str) -> None:
                _emit({"ready": peer})
                sampler.start()

            loop.consume(tally, ready)
        else:
            _emit({"ready": ""})  # its library loaded: the controller opens the window
            sampler.start()
            loop.publish(tally)
    except Exception as exc:  # noqa: BLE001 - one line for the controller, whatever the library raised
        traceback.print_exc()  # the whole story for a plugin author, on stderr
        _emit({"error": f"{type(exc).__name__}: {exc}".splitlines()[0]})
        return 1
    if sampler.is_alive():
        sampler.join(STOP_LIMIT)
    if "n1" not in out:
        _emit({"error": "the loop ended before its window did"})
        return 1
    _emit(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
