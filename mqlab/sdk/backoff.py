"""How long to wait between reconnection attempts: at once, then doubling up to a cap.

One schedule for every plugin's consumer loop, link and resend, so a broker that comes back
is found at the same pace whichever driver runs, and one that stays down is not hammered.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """The pauses before each attempt: 0, ``first``, then times ``factor`` up to ``cap``."""

    first: float = 0.1
    cap: float = 5.0
    factor: float = 2.0

    def delays(self) -> Iterator[float]:
        """0 (the first attempt at once), then the pauses, forever."""
        yield 0.0
        delay = self.first
        while True:
            yield delay
            delay = min(delay * self.factor, self.cap)

    async def attempts(self) -> AsyncIterator[int]:
        """Attempt numbers (1, 2, ...), each after its pause."""
        for n, delay in enumerate(self.delays(), start=1):
            if delay:
                await asyncio.sleep(delay)
            yield n


#: the pace of a plugin that names none
BACKOFF = Backoff()
