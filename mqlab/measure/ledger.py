"""The receipt ledger: which messages each server received, kept where a crash cannot lose it.

One bit per message in a file-backed shared mapping per (group, client): as cheap
to set as a bytearray, and the kernel keeps what was written even when the worker
is killed, so the controller still counts every message a dead server had received
(a fault must not turn receipts into losses).

A worker also maps its siblings' ledgers of the same step read-only, so a message
that another server of the same group already received (a redelivery after a
failure, say) is a duplicate *as it arrives*: the per-second series and the
latency histogram then count unique deliveries only, the same definition as the
summary that :func:`count_ledgers` computes after the drain.
"""

from __future__ import annotations

import mmap
import os
import re
import resource
from typing import Final

#: a ledger's bitmap without a file-size limit: 128 Mi messages per (group, client)
FULL_BYTES: Final = 16 * 1024 * 1024


def _ledger_bytes() -> int:
    """Bitmap size per (group, client): 128 Mi messages, or what the file-size limit allows.

    A worker under ``ulimit -f`` cannot size a file beyond it: the ledger then holds
    fewer messages (those beyond are counted as a LedgerOverflow error) instead of
    failing at the first receipt and turning every delivery into a loss.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return FULL_BYTES if soft == resource.RLIM_INFINITY else max(1, min(FULL_BYTES, soft))


#: ledger bitmap size per (group, client), read once per process
LEDGER_BYTES: Final = _ledger_bytes()

_NAME = re.compile(r"^(?P<worker>.+)\.g(?P<group>\d+)\.c(?P<client>\d+)\.bits$")

_Key = tuple[int, int]


class _Book:
    """One (group, client)'s bitmap, the ledgers of its siblings, and its highest seq."""

    __slots__ = ("bits", "last", "siblings")

    def __init__(self, bits: mmap.mmap, siblings: list[mmap.mmap]) -> None:
        self.bits = bits
        self.siblings = siblings  # the list look_for_siblings appends to
        self.last = -1


class Ledger:
    """This worker's receipts; duplicates are counted against every known ledger of the step."""

    __slots__ = (
        "_books", "_dups", "_maps", "_seen", "_siblings", "dir", "duplicates", "out_of_order",
        "overflow", "unique", "worker",
    )  # fmt: skip

    def __init__(self, directory: str, worker: str) -> None:
        self.dir = directory
        self.worker = worker
        self._maps: dict[_Key, mmap.mmap] = {}
        # which messages this worker got more than once, per (group, client): opened at
        # the first repeat, so a step without one writes nothing (the attribution reads it)
        self._dups: dict[_Key, mmap.mmap] = {}
        self._siblings: dict[_Key, list[mmap.mmap]] = {}
        self._seen: set[str] = set()
        # group -> client -> book: two int-keyed lookups per receipt cost less than
        # building and hashing a (group, client) tuple
        self._books: dict[int, dict[int, _Book]] = {}
        self.unique = 0
        self.duplicates = 0
        self.out_of_order = 0
        self.overflow = 0

    def _open(self, group: int, client: int) -> _Book:
        key = (group, client)
        path = os.path.join(self.dir, f"{self.worker}.g{key[0]}.c{key[1]}.bits")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.ftruncate(fd, LEDGER_BYTES)  # sparse: pages cost nothing until touched
            mm = mmap.mmap(fd, LEDGER_BYTES)
        finally:
            os.close(fd)
        self._maps[key] = mm
        book = _Book(mm, self._siblings.setdefault(key, []))
        self._books.setdefault(group, {})[client] = book
        return book

    def look_for_siblings(self) -> None:
        """Map ledgers other workers created since the last look (called about once a second)."""
        if not self.dir:
            return
        for name in os.listdir(self.dir):
            m = _NAME.match(name)
            if not m or m["worker"] == self.worker or name in self._seen:
                continue
            key = (int(m["group"]), int(m["client"]))
            try:
                with open(os.path.join(self.dir, name), "rb") as f:
                    mm = mmap.mmap(f.fileno(), LEDGER_BYTES, prot=mmap.PROT_READ)
            except (OSError, ValueError):
                continue  # not yet sized by its owner: next look
            self._siblings.setdefault(key, []).append(mm)
            self._seen.add(name)

    def record(self, group: int, client: int, seq: int) -> bool:
        """Note one receipt; True if it is the first of that message in the step."""
        try:
            book = self._books[group][client]
        except KeyError:
            book = self._open(group, client)
        idx = seq >> 3
        if idx >= LEDGER_BYTES:
            self.overflow += 1
            return False
        bit = 1 << (seq & 7)
        bits = book.bits
        byte = bits[idx]
        if byte & bit:
            self.duplicates += 1
            self._repeat(group, client, idx, bit)
            return False
        bits[idx] = byte | bit
        if book.siblings:
            for other in book.siblings:
                if other[idx] & bit:
                    # counted by the step's merge as a duplicate across workers
                    return False
        self.unique += 1
        if seq < book.last:
            self.out_of_order += 1
        else:
            book.last = seq
        return True

    def _repeat(self, group: int, client: int, idx: int, bit: int) -> None:
        """Mark a message this worker received again (the attribution dates repeats by it)."""
        mm = self._dups.get((group, client))
        if mm is None:
            path = os.path.join(self.dir, f"{self.worker}.g{group}.c{client}.dups")
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                os.ftruncate(fd, LEDGER_BYTES)
                mm = self._dups[(group, client)] = mmap.mmap(fd, LEDGER_BYTES)
            finally:
                os.close(fd)
        mm[idx] |= bit

    def close(self) -> None:
        for mm in (*self._maps.values(), *self._dups.values()):
            mm.close()
        for ms in self._siblings.values():
            for mm in ms:
                mm.close()
        self._maps.clear()
        self._dups.clear()
        self._siblings.clear()
        self._books.clear()


def _ledger_files(directory: str) -> dict[_Key, list[str]]:
    by_key: dict[_Key, list[str]] = {}
    for name in os.listdir(directory):
        m = _NAME.match(name)
        if m:
            key = (int(m["group"]), int(m["client"]))
            by_key.setdefault(key, []).append(os.path.join(directory, name))
    return by_key


def sent_at_least(
    directory: str, sent_by_client: dict[int, int], clients: set[int]
) -> dict[int, int]:
    """``sent_by_client`` raised, for ``clients``, to what the servers prove was sent.

    A client killed on purpose or by a crash never sends its last figures: its
    report is up to a second old. Sequence numbers are dense from 0, so a server's
    receipt of number N proves N + 1 sends. Only the given clients' ledgers are
    scanned (each file is a sparse bitmap of LEDGER_BYTES).
    """
    out = dict(sent_by_client)
    for (_, client), paths in _ledger_files(directory).items():
        if client not in clients:
            continue
        for path in paths:
            with open(path, "rb") as f:
                data = f.read().rstrip(b"\0")
            if data:
                top = (len(data) - 1) * 8 + data[-1].bit_length()  # highest bit + 1
                out[client] = max(out.get(client, 0), top)
    return out


def count_ledgers(directory: str, sent_by_client: dict[int, int]) -> tuple[int, int]:
    """(unique receipts, receipts beyond the first) from a step's ledger files.

    Sequence numbers are dense from 0, so only the first ``sent`` bits of each
    client matter; a receipt beyond them would be a message nobody sent.
    """
    unique = 0
    dup = 0
    for (_, client), paths in _ledger_files(directory).items():
        sent = sent_by_client.get(client, 0)
        mask = (1 << sent) - 1  # exactly the first ``sent`` bits, not whole bytes
        acc = 0
        total = 0
        for path in paths:
            with open(path, "rb") as f:
                v = int.from_bytes(f.read((sent + 7) // 8), "little") & mask
            total += v.bit_count()
            acc |= v
        u = acc.bit_count()
        unique += u
        dup += total - u
    return unique, dup


_DUPS = re.compile(r"^(?P<worker>.+)\.g(?P<group>\d+)\.c(?P<client>\d+)\.dups$")


def receipts(
    directory: str, sent_by_client: dict[int, int]
) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    """(group, client) -> (arrived, repeated): bitmaps (bit N, little endian: message N), cut
    to the first ``sent`` bits of that client. ``arrived`` is the OR over every worker's
    receipts; ``repeated`` marks messages received more than once, by two workers or twice
    by one (a message repeated thrice is still one bit: the counts stay the ledger's)."""

    def bits(path: str, size: int) -> int:
        with open(path, "rb") as f:
            return int.from_bytes(f.read(size), "little")

    again: dict[_Key, list[str]] = {}
    for name in os.listdir(directory):
        m = _DUPS.match(name)
        if m:
            key = (int(m["group"]), int(m["client"]))
            again.setdefault(key, []).append(os.path.join(directory, name))
    out: dict[_Key, tuple[bytes, bytes]] = {}
    for key, paths in _ledger_files(directory).items():
        sent = sent_by_client.get(key[1], 0)
        size = (sent + 7) // 8
        seen = twice = 0
        for path in paths:
            v = bits(path, size)
            twice |= seen & v
            seen |= v
        for path in again.get(key, ()):
            twice |= bits(path, size)
        mask = (1 << sent) - 1
        out[key] = ((seen & mask).to_bytes(size, "little"), (twice & mask).to_bytes(size, "little"))
    return out


def arrived(bits: bytes, lo: int, hi: int) -> int:
    """How many of messages ``lo`` .. ``hi - 1`` a :func:`receipts` bitmap holds (reads only
    those bytes: a step's many spans cost the bitmap's size once, not once per span)."""
    if hi <= lo:
        return 0
    chunk = int.from_bytes(bits[lo // 8 : (hi + 7) // 8], "little") >> (lo % 8)
    return (chunk & ((1 << (hi - lo)) - 1)).bit_count()
