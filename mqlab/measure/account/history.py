"""A step's history as the accountant reads it: frozen values, nothing read from anywhere.

Message numbers are dense from 0 per client, so a set of them is an ``int`` used as a
bitmap (:data:`Bits`: bit k is message k), the form the receipt ledgers already have. Each
client says how many it sent and, in *marks*, how many it had sent at known instants: a
message is dated by the marks around it (:meth:`Client.chunks`), to within their spacing.
All times are nanoseconds on the controller's monotonic clock.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Bits",
    "Chunk",
    "Client",
    "Depth",
    "Event",
    "Failure",
    "History",
    "Hold",
    "HostLost",
    "Receipts",
    "count",
    "highest",
    "numbers",
    "span",
]

#: a set of message numbers: bit k set = message k in the set
Bits = int


def span(lo: int, hi: int) -> Bits:
    """Messages ``lo`` .. ``hi - 1``."""
    return ((1 << (hi - lo)) - 1) << lo if hi > lo else 0


def count(bits: Bits) -> int:
    return bits.bit_count()


def numbers(bits: Bits) -> list[int]:
    """The message numbers in ``bits``, lowest first (for tests and small sets)."""
    out = []
    while bits:
        low = bits & -bits
        out.append(low.bit_length() - 1)
        bits ^= low
    return out


def highest(bits: Bits, k: int) -> Bits:
    """The ``k`` highest numbers of ``bits`` (all of them when it holds no more)."""
    if k <= 0:
        return 0
    if count(bits) <= k:
        return bits
    # the lowest cut whose bits above hold no more than k: their count falls as the cut rises
    lo, hi = 0, bits.bit_length()
    while lo < hi:
        mid = (lo + hi) // 2
        if count(bits >> mid) <= k:
            hi = mid
        else:
            lo = mid + 1
    return bits >> lo << lo


@dataclass(frozen=True, slots=True)
class Chunk:
    """Messages ``lo`` .. ``hi - 1`` of one client, each sent after ``after_ns``, by ``by_ns``."""

    lo: int
    hi: int
    after_ns: int
    by_ns: int

    def meets(self, start_ns: int, end_ns: int | None) -> bool:
        """Whether these messages may have been sent in [start, end] (None: no end)."""
        return self.by_ns >= start_ns and (end_ns is None or self.after_ns < end_ns)


@dataclass(frozen=True, slots=True)
class Failure:
    """Sends the driver refused (it raised): which messages, and its words."""

    kind: str  # returned (basic.return), nacked, send_failed
    cause: str
    numbers: Bits


@dataclass(frozen=True, slots=True)
class Client:
    """One client's sends: how many, when (marks: (t_ns, how many it had sent by then)),
    and the sends that failed."""

    client: int
    sent: int
    marks: tuple[tuple[int, int], ...] = ()
    failed: tuple[Failure, ...] = ()

    def chunks(self, sent: int, start_ns: int, end_ns: int) -> tuple[Chunk, ...]:
        """The client's ``sent`` messages cut at its marks, each run dated by the marks
        around it; before the first mark from ``start_ns``, after the last up to ``end_ns``."""
        points = sorted((t, min(max(n, 0), sent)) for t, n in self.marks)
        out: list[Chunk] = []
        lo, after = 0, min(start_ns, points[0][0]) if points else start_ns
        # before the first mark: from the history's start (or that mark, if earlier)
        for t, n in [*points, (max(end_ns, after), sent)]:
            if n > lo:
                out.append(Chunk(lo, n, after, t))
                lo = n
            if n >= lo:  # a mark below one already passed says nothing new
                after = max(after, t)
        return tuple(out)


@dataclass(frozen=True, slots=True)
class Receipts:
    """What servers of one delivery group got from one client: each message that arrived,
    and those that arrived more than once (by two workers, or twice at one)."""

    group: int
    client: int
    arrived: Bits
    repeated: Bits = 0


@dataclass(frozen=True, slots=True)
class Event:
    """Something on the step's timeline, injected or spontaneous.

    Its window runs from ``start_ns`` less the step's slowest delivery (a message sent that
    much before could still be on its way) to ``end_ns`` plus ``detect_ns``, the time the
    driver takes to notice (a message sent meanwhile went into a connection already dead).
    ``end_ns`` None: still in force when the history ends. ``clients`` and ``groups``: whose
    messages it can touch (None: everyone's). ``loses`` / ``duplicates``: whether it can
    lose or deliver twice a message in flight (a delay or a memory alarm only holds).
    ``symptom``: a driver's own report (a connection lost, a consumer cancelled), which an
    injected event in force may have caused: blamed only where no other event's window reaches.
    ``empties``: it empties the queues it reaches (a node stopped, killed or restarted): what
    they held may have been sent long before its window, so a run of missing messages that
    ends where its window starts, with none delivered in between, is its loss too.
    """

    name: str
    kind: str
    start_ns: int
    end_ns: int | None = None
    detect_ns: int = 0
    clients: frozenset[int] | None = None
    groups: frozenset[int] | None = None
    loses: bool = True
    duplicates: bool = True
    symptom: bool = False
    empties: bool = False

    def concerns(self, group: int, client: int) -> bool:
        return (self.clients is None or client in self.clients) and (
            self.groups is None or group in self.groups
        )

    def window(self, slowest_ns: int) -> tuple[int, int | None]:
        """[start less the slowest delivery, end plus the detection time]; None: no end."""
        end = None if self.end_ns is None else self.end_ns + self.detect_ns
        return self.start_ns - slowest_ns, end


@dataclass(frozen=True, slots=True)
class Hold:
    """What a fault proxy says it holds when the history ends, for the event that set it:
    ``messages`` at most (its own count, or its bytes over the smallest message's size)."""

    event: str
    messages: int
    bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Depth:
    """How many messages the broker held for some delivery groups (None: every group) when
    the history ended, read ``age_ns`` before its end; ``messages`` None: not known, ``why``.
    ``handed``: messages the broker handed to a consumer, not acknowledged yet (RabbitMQ's
    unacknowledged count): with a link fault in force at the end they may as well be in
    its proxy or delivered with their acknowledgement held, so they are not counted then.
    ``named``: which of those messages the broker showed, as (client, number), each once
    (Redis names its streams' entries); the rest of ``messages`` it only counted."""

    queue: str
    messages: int | None
    groups: frozenset[int] | None = None
    age_ns: int = 0
    why: str = ""
    handed: bool = False
    named: frozenset[tuple[int, int]] = frozenset()


@dataclass(frozen=True, slots=True)
class HostLost:
    """A host lost mid-step: its servers' receipts are known up to ``as_of_ns`` (its last
    shipped ledger state; None: none), what they got after it until ``lost_at_ns`` is not."""

    host: str
    groups: frozenset[int]
    as_of_ns: int | None
    lost_at_ns: int


@dataclass(frozen=True, slots=True)
class History:
    """Everything the accountant reads about one step.

    ``keeps``: the broker keeps messages in queues (a missing message may be queued), so
    its depth is needed: a group no fresh depth covers has its missing messages
    unaccounted. A brokerless or in-process driver keeps nothing. ``quiet_ns``: how long
    the servers had received nothing when the drain ended (a depth read no longer ago is
    as good as fresh: nothing left the queue since). ``slowest_ns``: the step's slowest
    delivery. ``duplicate_receipts``: receipts beyond the first, counted by the ledgers (a
    message received three times is one repeated message and two duplicate receipts).
    """

    groups: int
    clients: tuple[Client, ...]
    receipts: tuple[Receipts, ...]
    start_ns: int
    end_ns: int
    events: tuple[Event, ...] = ()
    keeps: bool = False
    depths: tuple[Depth, ...] = ()
    holds: tuple[Hold, ...] = ()
    hosts_lost: tuple[HostLost, ...] = ()
    drain_end: str = "idle"
    quiet_ns: int = 0
    slowest_ns: int = 0
    duplicate_receipts: int | None = None
