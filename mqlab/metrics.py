"""Measurement: per-worker recorders, and their merge in the controller.

A worker's :class:`Recorder` counts what it sent and received, keeps a bitmap
ledger of which (client, sequence) it received per delivery group, bins events
into 1 s intervals from the step's start, and records latency of messages
whose intended send time falls inside the measurement window into an
HdrHistogram. The controller merges recorders: counters add, ledgers OR (what
two workers both received is a duplicate), histograms add. Nothing is averaged.

lost = sent x groups - unique received, after the drain.
"""

from __future__ import annotations

import mmap
import os
import re
import statistics
import time
from collections import Counter
from typing import Any

from hdrh.histogram import HdrHistogram

# latency in microseconds, 1 us .. 1 h, 3 significant digits
_LOWEST, _HIGHEST, _DIGITS = 1, 3_600_000_000, 3

#: ledger bitmap size per (group, client): 128 Mi messages in one step
LEDGER_BYTES = 16 * 1024 * 1024


def new_histogram() -> HdrHistogram:
    return HdrHistogram(_LOWEST, _HIGHEST, _DIGITS)


def decode_histogram(encoded: str | bytes) -> HdrHistogram:
    return HdrHistogram.decode(encoded)


class Ledger:
    """Which sequence numbers of each (group, client) arrived; counts duplicates.

    One bit per message in a file-backed shared mapping per (group, client):
    as cheap to set as a bytearray, and the kernel keeps what was written even
    when the worker is killed, so the controller still counts every message
    a dead server had received (a fault test must not turn receipts into losses).
    """

    __slots__ = (
        "_last", "_maps", "dir", "duplicates", "out_of_order", "overflow", "unique", "worker",
    )  # fmt: skip

    def __init__(self, directory: str, worker: str) -> None:
        self.dir = directory
        self.worker = worker
        self._maps: dict[tuple[int, int], mmap.mmap] = {}
        self._last: dict[tuple[int, int], int] = {}
        self.unique = 0
        self.duplicates = 0
        self.out_of_order = 0
        self.overflow = 0

    def _open(self, key: tuple[int, int]) -> mmap.mmap:
        path = os.path.join(self.dir, f"{self.worker}.g{key[0]}.c{key[1]}.bits")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.ftruncate(fd, LEDGER_BYTES)  # sparse: pages cost nothing until touched
            mm = mmap.mmap(fd, LEDGER_BYTES)
        finally:
            os.close(fd)
        self._maps[key] = mm
        self._last[key] = -1
        return mm

    def record(self, group: int, client: int, seq: int) -> bool:
        """Note one receipt; True if it is the first of that message in this ledger."""
        key = (group, client)
        bm = self._maps.get(key) or self._open(key)
        idx = seq >> 3
        if idx >= LEDGER_BYTES:
            self.overflow += 1
            return False
        bit = 1 << (seq & 7)
        if bm[idx] & bit:
            self.duplicates += 1
            return False
        bm[idx] |= bit
        self.unique += 1
        if seq < self._last[key]:
            self.out_of_order += 1
        else:
            self._last[key] = seq
        return True

    def close(self) -> None:
        for mm in self._maps.values():
            mm.close()
        self._maps.clear()


_LEDGER_NAME = re.compile(r"^(?P<worker>.+)\.g(?P<group>\d+)\.c(?P<client>\d+)\.bits$")


def count_ledgers(directory: str, sent_by_client: dict[int, int]) -> tuple[int, int]:
    """(unique receipts, receipts of one message by two workers) from a step's ledger files.

    Sequence numbers are dense from 0, so only the first ``sent`` bits of each
    client matter; a receipt beyond them would be a message nobody sent.
    """
    by_key: dict[tuple[int, int], list[str]] = {}
    for name in os.listdir(directory):
        m = _LEDGER_NAME.match(name)
        if m:
            key = (int(m["group"]), int(m["client"]))
            by_key.setdefault(key, []).append(os.path.join(directory, name))
    unique = 0
    dup = 0
    for (_, client), paths in by_key.items():
        nbytes = (sent_by_client.get(client, 0) + 7) // 8
        acc = 0
        total = 0
        for path in paths:
            with open(path, "rb") as f:
                v = int.from_bytes(f.read(nbytes), "little")
            total += v.bit_count()
            acc |= v
        u = acc.bit_count()
        unique += u
        dup += total - u
    return unique, dup


class Recorder:
    """One worker's counters, series, ledger and latency histogram for one step."""

    def __init__(self, ledger_dir: str, worker: str) -> None:
        self.t0 = 0
        self.window_start = 0
        self.window_end = 1 << 62
        self.sent = 0
        self.received = 0  # every receipt, duplicates included
        self.round_trip = 0
        self.errors: dict[str, int] = {}
        self.sent_by_client: dict[int, int] = {}
        self.ledger = Ledger(ledger_dir, worker)
        self.hist = new_histogram()
        # latencies wait here until a snapshot folds them into the histogram:
        # hdrh's record_value costs microseconds in Python, a list append does not
        self._lat: list[int] = []
        # per-second bins since t0: sent, received, round trips, errors
        self.s_sent: list[int] = []
        self.s_recv: list[int] = []
        self.s_rt: list[int] = []
        self.s_err: list[int] = []

    def open(self, t0: int, window_start: int, window_end: int) -> None:
        self.t0, self.window_start, self.window_end = t0, window_start, window_end

    def _bin(self, series: list[int], now: int) -> None:
        i = (now - self.t0) // 1_000_000_000
        if i < 0:
            i = 0
        while len(series) <= i:
            series.append(0)
        series[i] += 1

    def on_sent(self, client: int) -> None:
        self.sent += 1
        self.sent_by_client[client] = self.sent_by_client.get(client, 0) + 1
        self._bin(self.s_sent, time.monotonic_ns())

    def on_received(self, group: int, client: int, seq: int, ts: int) -> None:
        """A server got a request; one-way latency (cast, notify) from its intended send."""
        now = time.monotonic_ns()
        self.received += 1
        self.ledger.record(group, client, seq)
        self._bin(self.s_recv, now)
        if self.window_start <= ts < self.window_end:
            self._lat.append((now - ts) // 1000)

    def on_reply(self, ts: int) -> None:
        """A call's reply arrived: round-trip latency from its intended send."""
        now = time.monotonic_ns()
        self.round_trip += 1
        self._bin(self.s_rt, now)
        if self.window_start <= ts < self.window_end:
            self._lat.append((now - ts) // 1000)

    def on_error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1
        self._bin(self.s_err, time.monotonic_ns())

    def fold(self) -> None:
        """Move pending latencies (us) into the histogram, each distinct value once."""
        if not self._lat:
            return
        pending, self._lat = self._lat, []
        record = self.hist.record_value
        for us, count in Counter(pending).items():
            record(max(1, us), count)

    def snapshot(self) -> dict[str, Any]:
        """A plain dict for the control channel (msgpack)."""
        self.fold()
        snap: dict[str, Any] = {
            "sent": self.sent,
            "received": self.received,
            "round_trip": self.round_trip,
            "duplicates": self.ledger.duplicates,
            "out_of_order": self.ledger.out_of_order,
            "errors": dict(self.errors),
            "series": [self.s_sent, self.s_recv, self.s_rt, self.s_err],
            "hist": self.hist.encode() if self.hist.get_total_count() else b"",
            "sent_by_client": list(self.sent_by_client.items()),
        }
        if self.ledger.overflow:
            snap["errors"]["LedgerOverflow"] = self.ledger.overflow
        return snap


def merge_histograms(encoded: list[str | bytes]) -> HdrHistogram:
    total = new_histogram()
    for e in encoded:
        if e:
            total.add(decode_histogram(e))
    return total


def latency_ms(hist: HdrHistogram) -> dict[str, float | None]:
    """p50/p90/p99/p99.9/max in milliseconds; None when nothing was measured."""
    if hist.get_total_count() == 0:
        return {"p50": None, "p90": None, "p99": None, "p999": None, "max": None, "count": 0}
    out: dict[str, float | None] = {
        k: round(hist.get_value_at_percentile(p) / 1000.0, 3)
        for k, p in (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p999", 99.9))
    }
    out["max"] = round(hist.get_max_value() / 1000.0, 3)
    out["count"] = hist.get_total_count()
    return out


def throughput(per_second: list[int], first: int, last: int) -> dict[str, float | None]:
    """Mean and standard deviation over the window's whole 1 s intervals [first, last).

    None when not one whole second was measured (a step stopped at once): a rate
    the code did not measure is not reported as zero.
    """
    window = [per_second[i] if i < len(per_second) else 0 for i in range(first, max(first, last))]
    if not window:
        return {"mean": None, "stdev": None}
    mean = sum(window) / len(window)
    stdev = statistics.pstdev(window) if len(window) > 1 else 0.0
    return {"mean": round(mean, 2), "stdev": round(stdev, 2)}
