"""What a worker records during a step: counts, per-second series, ledger, histograms.

Every event is binned into 1 s intervals from the step's ``t0`` by the worker's
own clock (CLOCK_MONOTONIC is one clock for every process on the host), so a
busy worker that reports late still reports *when* things happened. Latency is
counted only for unique deliveries and replies whose intended send time falls in
the window; one-way (server receipt) and round trip (caller's reply) each have
their own histogram. The recorder hands out :class:`~mqlab.measure.figures.WorkerFigures`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, Final

from hdrh.histogram import HdrHistogram

from mqlab.measure import latency
from mqlab.measure.figures import SERIES, OpenLoop, WorkerFigures
from mqlab.measure.ledger import Ledger
from mqlab.measure.spontaneous import SEND_ERRORS, SpontaneousLog
from mqlab.worker import clock

_NS: Final = 1_000_000_000
#: how often a worker marks each client's send count (each message dated to within it)
MARK_NS: Final = 100_000_000
#: at most this many marks kept per worker (beyond, the older half is thinned)
MAX_MARKS: Final = 50_000
#: at most this many runs of refused sends kept by number per worker
MAX_REFUSED_RUNS: Final = 100_000
#: a pending latency is one int: (second << 33) | (microseconds << 1) | in_window;
#: microseconds are clamped to [0, _US_MAX], above latency.HIGHEST_US so the fold
#: still counts them as over the range
_US_BITS: Final = 32
_US_MAX: Final = (1 << 32) - 1
_SEC_SHIFT: Final = 33
#: the series each kind of latency also counts: one pending latency per unique receipt
_COUNTED_IN = {"one_way": "received", "round_trip": "round_trip"}


class Recorder:
    def __init__(self, ledger_dir: str, worker: str) -> None:
        self.t0 = 0
        self.window_start = 0
        self.window_end = 1 << 62
        self.round_trip = 0
        self.failed = 0  # in-window messages that never completed
        # messages handed to the driver whose intended send time is in the window, and
        # those the open loop meant to send in it but never did: what one-way latency owes
        self.sent_in_window = 0
        self.unsent_in_window = 0
        self.over_range = 0
        self.last_rx = 0
        #: deliveries per queue (topic): counted by the handlers of a worker that serves
        #: several topics; a worker with one topic says ``only_topic`` and counts nothing
        self.per_topic: dict[str, list[int]] = {}
        self.only_topic = ""
        self.errors: dict[str, int] = {}
        self.error_messages: dict[str, str] = {}
        # client id -> how many it has sent: each client counts its own (ClientLoad.seq)
        self._senders: dict[int, Callable[[], int]] = {}
        #: what happened to this worker's connections, with each client's send count then
        self.spontaneous = SpontaneousLog(worker, self._senders)
        self._marks: list[list[int]] = []  # [client, monotonic ns, sent], every MARK_NS
        self._marked: dict[int, int] = {}  # each client's count at its latest mark
        #: sends the driver refused, by number: (client, kind) -> runs [lo, hi) of numbers
        self._refused: dict[tuple[int, str], list[list[int]]] = {}
        self._refused_runs = 0
        # open loops: each client's final account, or, while it runs, its account so far
        # (a client killed mid-step never gives a final one)
        self._ol_final: dict[int, OpenLoop] = {}
        self._ol_live: dict[int, Callable[[], OpenLoop]] = {}
        self.ledger = Ledger(ledger_dir, worker)
        # receipts before ``go`` (a server started mid-step finds a backlog waiting):
        # (arrival, send time), binned once the step's t0 is known
        self._early: list[tuple[int, int]] = []
        self.series: dict[str, list[int]] = {name: [] for name in SERIES}
        self._s_sent = self.series["sent"]
        self._s_err = self.series["errors"]
        self.hist = {kind: latency.new_histogram() for kind in latency.KINDS}
        self.per_second: dict[str, dict[int, HdrHistogram]] = {k: {} for k in latency.KINDS}
        # each second's histogram, encoded: a snapshot re-encodes only the seconds its
        # fold changed, so its cost does not grow with the step's length
        self._encoded: dict[str, dict[int, str]] = {k: {} for k in latency.KINDS}
        # latencies wait here, packed in one int each (_US_BITS), until a snapshot folds
        # them in: hdrh's record_value costs microseconds in Python, a list append does
        # not. The fold also counts them into the received and round_trip series: one
        # pending latency per unique receipt and per reply, binned by its second
        self._pending: dict[str, list[int]] = {k: [] for k in latency.KINDS}
        self._pending_ow = self._pending["one_way"]
        self._pending_rt = self._pending["round_trip"]
        # the worker's clock, as it is when the recorder is made (set_offset comes first)
        self._now = clock.now

    def open(self, t0: int, window_start: int, window_end: int) -> None:
        self.t0, self.window_start, self.window_end = t0, window_start, window_end
        for now, ts in self._early:
            self._pending_ow.append(self._pack(now, ts))
        self._early.clear()

    def in_window(self, intended: int) -> bool:
        return self.window_start <= intended < self.window_end

    def _bin(self, series: list[int], now: int) -> int:
        # before open() (an error a driver reports while starting) there is no t0 yet:
        # second 0, as for anything before t0
        i = (now - self.t0) // _NS if self.t0 else 0
        if i < 0:
            i = 0
        while len(series) <= i:
            series.append(0)
        series[i] += 1
        return i

    def count_sends(self, client: int, sent: Callable[[], int]) -> None:
        """Report ``client``'s sends as ``sent()``: one counter per client, not a dict per send."""
        self._senders[client] = sent

    def on_sent(self, now: int, intended: int) -> None:
        """A client hands one message meant for ``intended`` to its driver at ``now``."""
        if self.window_start <= intended < self.window_end:
            self.sent_in_window += 1
        series = self._s_sent
        i = (now - self.t0) // _NS
        if 0 <= i < len(series):
            series[i] += 1
        else:
            self._bin(series, now)

    def _pack(self, now: int, ts: int) -> int:
        us = (now - ts) // 1000
        if us < 0:
            us = 0
        elif us > _US_MAX:
            us = _US_MAX
        sec = (now - self.t0) // _NS  # below 0 (before t0): the fold bins it in second 0
        return (sec << _SEC_SHIFT) | (us << 1) | (self.window_start <= ts < self.window_end)

    def on_received(self, group: int, client: int, seq: int, ts: int) -> None:
        """A server got a message; only the first delivery of it counts in series and latency."""
        now = self._now()
        if not self.ledger.record(group, client, seq):
            return
        self.last_rx = now
        if not self.t0:
            self._early.append((now, ts))
            return
        # _pack, inline: this runs once per delivery
        us = (now - ts) // 1000
        if us >> _US_BITS:  # one test for both ends: negative, or above the range
            us = 0 if us < 0 else _US_MAX
        self._pending_ow.append(
            (((now - self.t0) // _NS) << _SEC_SHIFT)
            | (us << 1)
            | (self.window_start <= ts < self.window_end)
        )

    def _per_topic(self) -> dict[str, int]:
        if self.only_topic:
            n = self.ledger.unique + self.ledger.duplicates
            return {self.only_topic: n} if n else {}
        return {t: box[0] for t, box in self.per_topic.items() if box[0]}

    def _per_topic_last(self) -> dict[str, int]:
        if self.only_topic:
            return {self.only_topic: self.last_rx} if self.last_rx else {}
        return {t: box[1] for t, box in self.per_topic.items() if box[0]}

    def on_reply(self, ts: int) -> None:
        """A call's own reply arrived: round-trip latency from its intended send."""
        now = clock.now()
        self.round_trip += 1
        self.last_rx = now
        self._pending_rt.append(self._pack(now, ts))

    def on_error(
        self,
        kind: str,
        intended: int | None = None,
        message: str = "",
        client: int = -1,
        seq: int = -1,
    ) -> None:
        """An error; a send whose intended time is in the window also counts as failed.
        A send the driver refused (``client``'s message ``seq``) is kept by its number."""
        self.errors[kind] = self.errors.get(kind, 0) + 1
        if message:  # the latest of each kind, for the live monitor's errors view
            self.error_messages[kind] = message[:200]
        now = clock.now()
        self._bin(self._s_err, now)
        if intended is not None:
            if kind in SEND_ERRORS:  # a send the driver or broker refused: an event too
                self.spontaneous.add(SEND_ERRORS[kind], message, now=now)
                if seq >= 0:
                    self._refuse(client, kind, seq)
            if self.in_window(intended):
                self.failed += 1

    def _refuse(self, client: int, kind: str, seq: int) -> None:
        """One refused send, in runs of consecutive numbers (a closed loop failing fast
        refuses long runs): at most MAX_REFUSED_RUNS per worker, the rest counted only."""
        runs = self._refused.setdefault((client, kind), [])
        if runs and runs[-1][1] == seq:
            runs[-1][1] = seq + 1
        elif self._refused_runs < MAX_REFUSED_RUNS:
            runs.append([seq, seq + 1])
            self._refused_runs += 1
        else:
            self.errors["RefusedNotNumbered"] = self.errors.get("RefusedNotNumbered", 0) + 1

    def count_open_loop(self, client: int, so_far: Callable[[], OpenLoop]) -> None:
        """Report ``client``'s open-loop account as ``so_far()`` until its final one."""
        self._ol_live[client] = so_far

    @property
    def open_loop(self) -> OpenLoop | None:
        accounts = [*self._ol_final.values(), *(f() for f in self._ol_live.values())]
        if not accounts:
            return None
        total = accounts[0]
        for a in accounts[1:]:
            total = total.merge(a)
        return total

    def on_open_loop(self, figures: OpenLoop, not_sent_in_window: int, client: int = 0) -> None:
        """The open-loop generator's account: what it meant to send and what it managed."""
        self._ol_live.pop(client, None)
        self._ol_final[client] = figures
        # the messages never sent are the ones with the worst latency
        self.failed += not_sent_in_window
        self.unsent_in_window += not_sent_in_window

    def fold(self) -> None:
        for kind, pending in self._pending.items():
            if not pending:
                continue
            packed = Counter(pending)
            pending.clear()  # the same list: on_received appends to it by a bound name
            # plain dicts: a Counter's missing-key hook is a Python call per new value
            by_sec: dict[int, dict[int, int]] = {}
            window: dict[int, int] = {}
            # each value goes to its bucket of the 3-digit histogram at once: spread
            # latencies (a backlog) have nearly as many distinct values as messages, but
            # a few thousand buckets, and every histogram here records by bucket anyway
            mask, top = latency.bucket_shape(self.hist[kind])
            for key, count in packed.items():
                us = (key >> 1) & _US_MAX
                if us <= latency.HIGHEST_US:  # above: record() counts it as over the range
                    shift = (us | mask).bit_length() - top
                    us = us >> shift << shift
                sec = key >> _SEC_SHIFT
                if sec < 0:
                    sec = 0  # arrived before t0: second 0, as every series bins it
                counts = by_sec.get(sec)
                if counts is None:
                    counts = by_sec[sec] = {}
                counts[us] = counts.get(us, 0) + count
                if key & 1:
                    window[us] = window.get(us, 0) + count
            per_second = self.per_second[kind]
            encoded = self._encoded[kind]
            series = self.series[_COUNTED_IN[kind]]
            for sec, counts in by_sec.items():
                while len(series) <= sec:
                    series.append(0)
                series[sec] += sum(counts.values())
                hist = per_second.get(sec)
                if hist is None:
                    hist = per_second[sec] = latency.new_histogram(latency.SECOND_DIGITS)
                latency.record(hist, counts)
                encoded.pop(sec, None)
            self.over_range += latency.record(self.hist[kind], window)

    def mark(self) -> None:
        """Each client's send count now, if it changed since its last mark: the marks date
        every message to within their spacing (the worker marks every MARK_NS)."""
        now = clock.now()
        marked = self._marked
        for c, sent in self._senders.items():
            n = sent()
            if marked.get(c) != n:
                marked[c] = n
                self._marks.append([c, now, n])
        if len(self._marks) > MAX_MARKS:  # a long step: the older marks thinned, halved
            half = len(self._marks) // 2
            self._marks[:half] = self._marks[:half:2]

    def _send_marks(self) -> list[list[int]]:
        """Every mark so far, this report's included."""
        self.mark()
        return list(self._marks)

    def _refused_sends(self) -> list[list[Any]]:
        return [[c, kind, lo, hi] for (c, kind), runs in self._refused.items() for lo, hi in runs]

    def figures(self) -> WorkerFigures:
        """What this worker has measured so far, per-second histograms included: every
        snapshot carries them, for the live monitor's p99 over time (a few small
        2-digit histograms a second)."""
        self.fold()
        self.ledger.look_for_siblings()
        errors = dict(self.errors)
        if self.ledger.overflow:
            errors["LedgerOverflow"] = self.ledger.overflow
        per_second: dict[str, list[str]] = {}
        for kind, by_sec in self.per_second.items():
            if by_sec:
                encoded = self._encoded[kind]
                for i, hist in by_sec.items():
                    if i not in encoded:
                        encoded[i] = latency.encode(hist)
                per_second[kind] = [encoded.get(i, "") for i in range(max(by_sec) + 1)]
        return WorkerFigures(
            at=clock.now(),
            sent=sum(self._s_sent),
            sent_by_client={c: n for c, sent in self._senders.items() if (n := sent())},
            received=self.ledger.unique,
            duplicates=self.ledger.duplicates,
            out_of_order=self.ledger.out_of_order,
            round_trip=self.round_trip,
            failed=self.failed,
            sent_in_window=self.sent_in_window,
            unsent_in_window=self.unsent_in_window,
            over_range=self.over_range,
            last_rx=self.last_rx,
            per_topic=self._per_topic(),
            per_topic_last=self._per_topic_last(),
            errors=errors,
            error_messages=dict(self.error_messages),
            series={k: list(v) for k, v in self.series.items()},
            hist={k: latency.encode(h) for k, h in self.hist.items() if h.get_total_count()},
            per_second=per_second,
            open_loop=self.open_loop,
            spontaneous=self.spontaneous.snapshot(),
            spontaneous_dropped=self.spontaneous.dropped,
            send_marks=self._send_marks(),
            refused=self._refused_sends(),
        )
