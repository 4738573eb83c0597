"""A real plugin whose servers silently drop, duplicate or delay chosen messages: a step whose
right account is known exactly, to check mqlab's own accounting against.

Every attribute of this module but its own names is a plugin wrapped: ``knownanswer:pika``
is the pika plugin's transport class, subclassed so that its server-side handler, before
the core's, decodes each delivery's client and number and

- ``silent_drop``: never hands it on (the broker took it as delivered: nothing is said);
- ``silent_duplicate``: hands it on twice;
- ``silent_delay``: hands it on ``silent_delay_ms`` later (casts and notifications: a
  call's reply cannot wait).

Each option names message numbers, the same for every client: ``"9-799%10"`` is 9, 19,
.., 799; ``"3,50-59"`` is 3 and 50 to 59. The wrapped plugin is registered under an entry
point of its own (``mqlab.transports``: ``known-pika = mqlab.faults.knownanswer:pika``),
found by the workers like any plugin; nothing else of it changes.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from functools import cache
from typing import Any, ClassVar

from mqlab.measure.identify import identifier
from mqlab.transport import Handler, Option, OptionConflict, Target, Transport

__all__ = ["OPTIONS", "chosen", "wrapped"]

_PART = re.compile(r"^(\d+)(?:-(\d+)(?:%(\d+))?)?$")
#: at most this many chosen numbers per option: a known answer is small
MOST = 1_000_000

OPTIONS: Mapping[str, Option] = {
    "silent_drop": Option((str,), "", "message numbers the servers drop silently"),
    "silent_duplicate": Option((str,), "", "message numbers the servers handle twice"),
    "silent_delay": Option((str,), "", "message numbers the servers handle late (casts)"),
    "silent_delay_ms": Option((int,), 200, "how late, in ms", minimum=0, maximum=60_000),
}


def chosen(text: str) -> frozenset[int]:
    """The numbers an option names (see the module doc); ValueError naming the part."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = _PART.match(part)
        if not m:
            raise ValueError(f"{part!r} is not N, A-B or A-B%K")
        lo = int(m[1])
        hi = int(m[2]) if m[2] else lo
        step = int(m[3]) if m[3] else 1
        if hi < lo or step < 1 or len(out) + (hi - lo) // step >= MOST:
            raise ValueError(f"{part!r}: A-B needs A <= B, K >= 1, at most {MOST:,} numbers")
        out.update(range(lo, hi + 1, step))
    return frozenset(out)


@cache
def wrapped(plugin: str) -> type[Transport]:
    """The transport class of ``plugin`` (a registered plugin's name), wrapped."""
    from mqlab import registry

    base = registry.get(plugin).cls

    class KnownAnswer(base):  # type: ignore[valid-type,misc]
        option_specs: ClassVar[Mapping[str, Option]] = {**base.option_specs, **OPTIONS}

        @classmethod
        def check_combinations(cls, options: Mapping[str, Any]) -> None:
            super().check_combinations(options)
            for name in ("silent_drop", "silent_duplicate", "silent_delay"):
                try:
                    chosen(options[name])
                except ValueError as exc:
                    raise OptionConflict(name, str(exc)) from None

        def _silently(self, handler: Handler) -> Handler:
            opts = self.config.options
            drop, twice = chosen(opts["silent_drop"]), chosen(opts["silent_duplicate"])
            late, delay_s = chosen(opts["silent_delay"]), opts["silent_delay_ms"] / 1000.0
            identity = identifier()

            def handle(body: bytes) -> bytes | None:
                seq = who[1] if (who := identity(body)) else None
                if seq in drop:
                    return None
                if seq in twice:
                    handler(body)
                if seq in late:
                    asyncio.get_running_loop().call_later(delay_s, handler, body)
                    return None
                return handler(body)

            return handle

        async def serve_rpc(self, target: Target, handler: Handler) -> None:
            await super().serve_rpc(target, self._silently(handler))

        async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
            await super().serve_notifications(target, pool, self._silently(handler))

    KnownAnswer.__name__ = KnownAnswer.__qualname__ = f"KnownAnswer_{base.__name__}"
    return KnownAnswer


def __getattr__(name: str) -> Any:
    """``knownanswer.redis_streams``: the redis-streams plugin wrapped (``_`` for ``-``)."""
    if name.startswith("__"):
        raise AttributeError(name)
    return wrapped(name.replace("_", "-"))
