"""The worker's clock: ``CLOCK_MONOTONIC``, shifted onto the controller's on another host.

On the controller's own host every process shares one monotonic clock, and ``now`` is
``time.monotonic_ns`` itself. A worker on another host is told that host's offset from the
controller (measured by :mod:`mqlab.hosts.clock` before the step) and reads its clock less
that offset: the ``go`` times, the send stamps in messages, receipt times and per-second bins
are then all on the controller's clock, so a cast sent on one host and received on another
has a one-way latency wrong by no more than the two offsets' error bounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["now", "set_offset"]

#: the worker's clock, ns; every reading of time in a worker goes through it
now: Callable[[], int] = time.monotonic_ns


def set_offset(offset_ns: int) -> None:
    """This host's ``CLOCK_MONOTONIC`` less the controller's; 0 on the controller's host."""
    global now
    if not offset_ns:
        now = time.monotonic_ns
        return
    mono = time.monotonic_ns

    def shifted() -> int:
        return mono() - offset_ns

    now = shifted
