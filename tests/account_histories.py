"""Hand-made step histories for the accountant's tests: clients sending at a steady rate,
dated by marks every 100 ms, and the receipts of everything but chosen messages."""

from __future__ import annotations

from collections.abc import Iterable

from mqlab.measure.account import Client, Receipts

MS = 1_000_000
S = 1_000_000_000
#: the marks' spacing: how finely a send is dated
EVERY = 100 * MS


def bits(numbers: Iterable[int]) -> int:
    out = 0
    for n in numbers:
        out |= 1 << n
    return out


def steady(client: int, rate: float, seconds: float, start: int = 0) -> Client:
    """A client that sent ``rate`` messages a second for ``seconds``, marked every 100 ms."""
    sent = round(rate * seconds)
    ends = range(EVERY, int(seconds * S) + 1, EVERY)
    return Client(client, sent, tuple((start + t, min(sent, round(rate * t / S))) for t in ends))


def got(
    client: Client, missing: Iterable[int] = (), twice: Iterable[int] = (), group: int = 0
) -> Receipts:
    """Receipts of every message ``client`` sent but ``missing``; ``twice`` arrived twice."""
    every = (1 << client.sent) - 1
    return Receipts(group, client.client, every & ~bits(missing), bits(twice))
