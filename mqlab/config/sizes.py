"""Message size distributions: fixed, uniform range, or a weighted table.

The built-in ``openstack`` table is the message-length sample that ships with
oslo.messaging's simulator (``tools/messages_length.yaml``): 4,077 messages the
AMQP driver sent during a Rally ``boot_and_delete_server`` scenario, binned by
500 characters (min 806, median 2,450, p99 11,292). Like the simulator, a bin is
picked by weight and a length drawn uniformly inside it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from mqlab.config.limits import MAX_MESSAGE_BYTES, MAX_SIZE_TABLE, MAX_SIZE_WEIGHT

# (low, high, messages) from oslo.messaging tools/messages_length.yaml, 500-char bins
OPENSTACK_BINS: tuple[tuple[int, int, int], ...] = (
    (500, 999, 56),
    (1000, 1499, 105),
    (1500, 1999, 801),
    (2000, 2499, 1166),
    (2500, 2999, 616),
    (3000, 3499, 150),
    (3500, 3999, 100),
    (4000, 4499, 37),
    (4500, 4999, 177),
    (5000, 5499, 250),
    (5500, 5999, 99),
    (6000, 6499, 154),
    (6500, 6999, 211),
    (7000, 7499, 52),
    (7500, 7999, 53),
    (11000, 11499, 50),
)

BUILTIN = {"openstack": OPENSTACK_BINS}


@dataclass(frozen=True, slots=True)
class SizeSpec:
    """A size distribution, as written in a profile (``1024``, ``"64..4096"``, ``"openstack"``)."""

    text: str  # the profile's own spelling, for display and results
    bins: tuple[tuple[int, int, int], ...]  # (low, high, weight); fixed = one bin low == high

    @property
    def fixed(self) -> int | None:
        if len(self.bins) == 1 and self.bins[0][0] == self.bins[0][1]:
            return self.bins[0][0]
        return None


def parse_size(value: object) -> SizeSpec:
    """Parse a profile's ``message_size``; raises ValueError with what was expected.

    No size may exceed :data:`~mqlab.config.limits.MAX_MESSAGE_BYTES`.
    """
    spec = _parse_size(value)
    largest = max(hi for _, hi, _ in spec.bins)
    if largest > MAX_MESSAGE_BYTES:
        raise ValueError(
            f"message size {largest:,} bytes is above mqlab's limit of {MAX_MESSAGE_BYTES:,}"
        )
    return spec


def _parse_size(value: object) -> SizeSpec:
    expected = (
        'expected a byte count (1024), a range ("64..4096"), a built-in table '
        f"({', '.join(repr(k) for k in BUILTIN)}) or [[size, weight], ...]"
    )
    if isinstance(value, bool):
        raise ValueError(expected)
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"message size must be at least 1 byte, got {value}")
        return SizeSpec(str(value), ((value, value, 1),))
    if isinstance(value, str):
        if value in BUILTIN:
            return SizeSpec(value, BUILTIN[value])
        if ".." in value:
            lo_s, _, hi_s = value.partition("..")
            try:
                lo, hi = int(lo_s), int(hi_s)
            except ValueError:
                raise ValueError(f"{expected}, got {value!r}") from None
            if lo < 1 or hi < lo:
                raise ValueError(f"range needs 1 <= low <= high, got {value!r}")
            return SizeSpec(value, ((lo, hi, 1),))
        raise ValueError(f"{expected}, got {value[:40]!r}")
    if isinstance(value, list) and len(value) > MAX_SIZE_TABLE:
        raise ValueError(f"a size table of {len(value):,} entries; the limit is {MAX_SIZE_TABLE}")
    if isinstance(value, list) and value:
        bins = []
        for item in value:
            ok = (
                isinstance(item, list)
                and len(item) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in item)
                and item[0] >= 1
                and 1 <= item[1] <= MAX_SIZE_WEIGHT
            )
            if not ok:
                shown = repr(item) if len(repr(item)) < 80 else repr(item)[:77] + "..."
                raise ValueError(
                    f"{expected} (a weight 1 .. {MAX_SIZE_WEIGHT:,}); bad table entry {shown}"
                )
            bins.append((item[0], item[0], item[1]))
        return SizeSpec(repr(value), tuple(bins))
    raise ValueError(f"{expected}, got {value!r}")


class SizeSampler:
    """Draws sizes from a spec; the fixed case costs nothing per message."""

    def __init__(self, spec: SizeSpec, seed: int = 0) -> None:
        self._fixed = spec.fixed
        self._rng = random.Random(seed)
        self._bins = spec.bins
        self._weights = [w for _, _, w in spec.bins]

    @property
    def fixed(self) -> int | None:
        """The one size every message has, or None for a distribution."""
        return self._fixed

    def next(self) -> int:
        if self._fixed is not None:
            return self._fixed
        lo, hi, _ = self._rng.choices(self._bins, self._weights)[0]
        return lo if lo == hi else self._rng.randint(lo, hi)
