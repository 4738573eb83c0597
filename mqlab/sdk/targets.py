"""What a client works out once per target: a route, a subject, a stream key.

The core's senders cast to the same :class:`~mqlab.transport.Target` objects message after
message, and a name built from a target (its route, a regex per name, a join) costs more than
the send's own bookkeeping. :class:`PerTarget` makes it once per target object and hands it
back by the object's identity: no hash of the target (a dataclass hashes all its fields), and
the target is kept, so its ``id`` cannot pass to another object while it is known.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from mqlab.transport import Target

_T = TypeVar("_T")


class PerTarget(Generic[_T]):
    """``make(target)``, made once per target object: ``PerTarget(subjects.rpc)(target)``."""

    __slots__ = ("_known", "_make")

    def __init__(self, make: Callable[[Target], _T]) -> None:
        self._make = make
        self._known: dict[int, tuple[Target, _T]] = {}

    def __call__(self, target: Target) -> _T:
        known = self._known.get(id(target))
        if known is not None and known[0] is target:
            return known[1]
        value = self._make(target)
        self._known[id(target)] = (target, value)
        return value
