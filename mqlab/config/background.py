"""A scenario's background stress, as the profile gives it.

``background = { pattern = "notify", rate = 1000 }`` (optional: ``message_size``,
``servers``, ``pools``): a steady open-loop load the step runs beside its own
pattern, the probe. :mod:`mqlab.run.background` runs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mqlab.config import limits
from mqlab.config.fields import FieldReader
from mqlab.config.sizes import SizeSpec, parse_size

__all__ = ["Background", "parse_background"]

_KEYS = {"pattern", "rate", "message_size", "servers", "pools", "durable"}
_PATTERNS = ("call", "cast", "notify")


@dataclass(frozen=True, slots=True)
class Background:
    """The load a scenario runs beside its probe: one pattern, open loop at ``rate``."""

    pattern: str
    rate: float
    message_size: SizeSpec | None = None  # None: the scenario's
    servers: int = 1
    pools: int = 1
    durable: bool | None = None  # None: the scenario's

    @property
    def label(self) -> str:
        """``notify@1000/s``: what the load column adds to the probe's load."""
        return f"{self.pattern}@{self.rate:g}/s"


def parse_background(r: FieldReader) -> Background | None:
    """``background = { pattern = "notify", rate = 1000 }`` (optional: message_size,
    servers, pools, durable), refused field by field like the rest of the profile."""
    if "background" not in r.table:
        return None
    b = FieldReader(r.path, r.field("background"), r.table["background"], _KEYS)
    pattern = b.get("pattern", (str,), None, "call, cast or notify")
    if pattern not in _PATTERNS:
        raise b.fail("pattern", f"expected one of call, cast, notify, got {pattern!r}")
    rate = b.get("rate", (int, float), None, "a rate in msg/s")
    if rate is None or not math.isfinite(rate) or rate <= 0:
        raise b.fail("rate", f"expected a rate in msg/s above 0 (open loop), got {rate!r}")
    b.checked("rate", rate, lambda x: limits.at_most(x, limits.MAX_RATE, "rate"))
    size = None
    if "message_size" in b.table:
        size = b.checked("message_size", b.table["message_size"], parse_size)
    servers = b.count("servers", 1, 1, limits.MAX_SERVERS)
    pools = b.count("pools", 1, 1, limits.MAX_SERVERS)
    if pools != 1 and pattern != "notify":
        raise b.fail("pools", "pools apply to a notify background only")
    if pools > servers:
        raise b.fail("pools", f"pools = {pools} needs at least {pools} servers; raise servers")
    durable = b.boolean("durable", False) if "durable" in b.table else None
    return Background(pattern, float(rate), size, servers, pools, durable)
