"""The open-loop pacer: wakes the event loop at each intended send time, to about 0.1 ms.

Event-loop timers (asyncio's and uvloop's) have millisecond resolution, so a
generator that sleeps on them sends late, in bursts: at 1,000 msg/s that alone
put 0.7 ms into every message's latency. A spinning loop would be on time but
burn a core that the driver under test needs. Instead a small thread sleeps
with the kernel's nanosecond timer (``time.sleep`` is ``clock_nanosleep``) and
wakes the loop through its self-pipe when a message falls due; the loop then
sends everything due. The thread never sends and never touches a transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import math
import threading
import time

from mqlab.worker import clock

#: the pacer wakes the loop at most this often; faster schedules send several per wake
MIN_GAP_NS = 100_000
#: how early the thread wakes the loop for a slow schedule (the loop then yields until due)
LEAD_NS = 150_000
#: sleeps longer than this use an interruptible wait, so close() is prompt
_LONG_NS = 5_000_000
_PR_SET_TIMERSLACK = 29


def _tight_timer() -> None:
    """Ask Linux to wake this thread within 1 us of its timer, not the default 50 us slack."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_TIMERSLACK, 1000, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the default slack only costs precision


class Pacer:
    """Wake-ups at ``start + k * interval`` for every k with a time before ``end``."""

    def __init__(self, start: int, interval_ns: float, end: int) -> None:
        self._loop = asyncio.get_running_loop()
        self._due = asyncio.Event()
        self._closed = threading.Event()
        self._start, self._interval, self._end = start, interval_ns, end
        # waking the loop from a thread takes about 0.1 ms: for schedules slow enough that
        # it matters, wake that much early and yield to the loop until the message is due
        self._lead = LEAD_NS if interval_ns >= 4 * LEAD_NS else 0
        self._target = 0  # the due time of the latest wake-up (set on the loop's thread)
        self._thread = threading.Thread(target=self._run, name="mqlab-pacer", daemon=True)
        self._thread.start()

    def _wake(self, due: int = 0) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed under us: nothing to wake
            self._loop.call_soon_threadsafe(self._fire, due)

    def _fire(self, due: int) -> None:
        self._target = due
        self._due.set()

    def _run(self) -> None:
        _tight_timer()
        k = 0
        now_ns = clock.now
        while not self._closed.is_set():
            due = self._start + int(k * self._interval)
            if due >= self._end:
                break
            wait = due - self._lead - now_ns()
            if wait > _LONG_NS:
                # sleep in an interruptible wait up to shortly before, then precisely
                if self._closed.wait((wait - _LONG_NS / 2) / 1e9):
                    return
                wait = due - self._lead - now_ns()
            if wait > 0:
                time.sleep(wait / 1e9)
            self._wake(due)
            now = now_ns()
            k = max(k + 1, math.ceil((now + MIN_GAP_NS - self._start) / self._interval))
        self._wake()  # the schedule is over: let the generator see the end

    async def wait(self) -> None:
        """Until the next message falls due (or the schedule ended)."""
        if self._closed.is_set() or not self._thread.is_alive():
            await asyncio.sleep(0)
            return
        await self._due.wait()
        self._due.clear()
        target = self._target
        while clock.now() < target:
            await asyncio.sleep(0)  # deliveries and replies keep flowing meanwhile

    def close(self) -> None:
        self._closed.set()
