"""Which message a body is, when the codec setting that wrote it is not known.

A reader outside the step's workers (a known-answer server deciding what to drop, a
broker's depth naming what it holds) sees bodies but not the step's serializer and
envelope: :func:`identifier` tries each setting a step may run, and keeps to the first that
reads a body (every body of a step is written one way).
"""

from __future__ import annotations

from collections.abc import Callable

from mqlab.codec import SERIALIZERS, Codec

__all__ = ["identifier"]


def identifier() -> Callable[[bytes], tuple[int, int] | None]:
    """A function giving a body's ``(client, number)``; None when no setting reads it."""
    settings = [Codec(s, e) for s in reversed(SERIALIZERS) for e in (False, True)]
    found: list[Codec] = []

    def identity(body: bytes) -> tuple[int, int] | None:
        for codec in found or settings:
            try:
                client, seq, _ = codec.decode(body)
            except Exception:  # noqa: BLE001 - not this setting's (or not a body): the next
                continue
            if not (isinstance(client, int) and isinstance(seq, int) and seq >= 0):
                continue  # a map that merely has the keys: not a message
            if not found:
                found.append(codec)
            return client, seq
        return None

    return identity
