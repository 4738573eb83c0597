"""The quiet gate (``--wait-quiet[=PERCENT]``): before each step, wait until other
processes take less than PERCENT of the machine, for at most a bound, and say so live.

Each second the machine is sampled (:func:`mqlab.machine.measure_others`): every CPU's
busy time less that of mqlab's own processes (this one, its children, the brokers). The
step starts at the first quiet second, or when the bound runs out (it then starts anyway,
and its record says the machine never went quiet). What the gate waited for is recorded
with the step: the limit, the seconds waited, the last share seen and the heaviest others.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

from mqlab.machine import Others, measure_others
from mqlab.record.trust import Waited

__all__ = ["DEFAULT_LIMIT_S", "DEFAULT_PERCENT", "QuietGate", "Waited"]

#: other processes must take less than this share of the machine (%) by default
DEFAULT_PERCENT = 10.0
#: the longest wait before one step (seconds) by default
DEFAULT_LIMIT_S = 300.0


class QuietGate:
    """Waits before a step until the machine is quiet; ``ours`` gives the brokers' PIDs."""

    def __init__(
        self,
        percent: float = DEFAULT_PERCENT,
        limit_s: float = DEFAULT_LIMIT_S,
        ours: Callable[[], Iterable[int]] = tuple,
        log: Callable[[str], None] | None = None,
        sample_s: float = 1.0,
    ) -> None:
        self.percent = percent
        self.limit_s = limit_s
        self.ours = ours
        #: where a run without the live monitor says that it waits, once, and how it ended
        self.log = log
        self.sample_s = sample_s

    async def wait(self, what: str, say: Callable[[str], None], stop: Callable[[], bool]) -> Waited:
        """Sample until quiet, the bound, or ``stop()`` (a Ctrl-C); ``say`` the state live.
        ``what``: the step, as the log line names it."""
        t0 = time.monotonic()
        said = False
        while True:
            last = await asyncio.to_thread(measure_others, self.sample_s, tuple(self.ours()))
            waited = time.monotonic() - t0
            done = self._done(last, waited, stop())
            if done is not None:
                if said and self.log is not None:
                    self.log(f"mqlab: {what}: {done.text}")
                return done
            assert last is not None
            top = f" ({last.heavy_text()})" if last.heavy else ""
            line = (
                f"waiting for a quiet machine: others take {last.others_percent:.0f} % "
                f"(limit {self.percent:g} %){top}, {waited:.0f} of {self.limit_s:.0f} s"
            )
            say(line)
            if not said and self.log is not None:
                self.log(f"mqlab: {what}: {line}")
            said = True

    def _done(self, last: Others | None, waited: float, stopped: bool) -> Waited | None:
        if last is None:  # no /proc/stat: nothing to wait for
            return Waited(percent=self.percent, waited_s=round(waited, 1), quiet=True)
        if last.others_percent < self.percent:
            return Waited(
                percent=self.percent, waited_s=round(waited, 1), quiet=True,
                others_percent=last.others_percent,
            )  # fmt: skip
        if waited >= self.limit_s or stopped:
            heavy = tuple(f"{n} {p:.0f} %" for n, p in last.heavy[:3])
            return Waited(
                percent=self.percent, waited_s=round(waited, 1), quiet=False,
                others_percent=last.others_percent, heavy=heavy,
            )  # fmt: skip
        return None
