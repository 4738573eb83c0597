"""Message encoding, identical for every driver.

Every message carries the client id (``c``), sequence number (``s``), intended
send time (``t``, ``time.monotonic_ns()``) and padding (``p``) up to the
drawn size. ``serializer`` is json or msgpack; ``envelope`` wraps the
serialised message once more, as oslo.messaging's envelope does
(``{"oslo.version": "2.0", "oslo.message": <serialised>}``): the double
serialisation whose cost seed 003 measured.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

import msgpack

SERIALIZERS = ("json", "msgpack")
OSLO_VERSION = "2.0"

_PAD = "x" * 65536


class Codec:
    """Encode/decode requests and replies for one (serializer, envelope) setting."""

    def __init__(self, serializer: str = "json", envelope: bool = True) -> None:
        if serializer not in SERIALIZERS:
            raise ValueError(f"serializer must be one of {SERIALIZERS}, got {serializer!r}")
        self.serializer = serializer
        self.envelope = envelope
        dumps: Callable[[Any], bytes]
        loads: Callable[[bytes], Any]
        if serializer == "json":
            dumps = _json_dumps
            loads = json.loads
        else:
            dumps = msgpack.Packer().pack  # a reused Packer is the fast path
            loads = _msgpack_loads
        self._dumps = dumps
        self._loads = loads
        # bytes the message costs beyond its padding, to hit the requested size
        self._overhead = len(self._encode(1, 1, 1 << 62, ""))

    def _encode(self, client: int, seq: int, ts: int, pad: str) -> bytes:
        body = self._dumps({"c": client, "s": seq, "t": ts, "p": pad})
        if self.envelope:
            inner: str | bytes = body.decode() if self.serializer == "json" else body
            return self._dumps({"oslo.version": OSLO_VERSION, "oslo.message": inner})
        return body

    def encode(self, client: int, seq: int, ts: int, size: int) -> bytes:
        """A request of about ``size`` bytes (never less than the header needs)."""
        pad = size - self._overhead
        return self._encode(client, seq, ts, _pad(pad) if pad > 0 else "")

    def _decode(self, body: bytes) -> dict[str, Any]:
        msg = self._loads(body)
        if self.envelope:
            inner = msg["oslo.message"]
            msg = self._loads(inner.encode() if isinstance(inner, str) else inner)
        return msg  # type: ignore[no-any-return]

    def decode(self, body: bytes) -> tuple[int, int, int]:
        """``(client, seq, ts)`` of a request or a reply."""
        msg = self._decode(body)
        return msg["c"], msg["s"], msg["t"]

    def reply(self, client: int, seq: int, ts: int) -> bytes:
        """The server's reply: the request's identity, no padding."""
        return self._encode(client, seq, ts, "")


def _pad(n: int) -> str:
    if n <= len(_PAD):
        return _PAD[:n]
    return "x" * n


def _json_dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _msgpack_loads(body: bytes) -> Any:
    return msgpack.unpackb(body, raw=False)


def cost_us(codec: Codec, sizes: Iterable[int], rounds: int = 3) -> float:
    """Mean microseconds one message costs to encode and decode at these sizes.

    A request is encoded once by its client and decoded once by its server (a
    call adds a small reply each way): this is the part of every figure that is
    the codec's, whatever the driver.
    """
    batch = list(sizes)
    if not batch:
        return 0.0
    clock = time.perf_counter_ns
    best = None
    for _ in range(rounds):  # the best round: the least disturbed by the rest of the machine
        t = clock()
        for i, size in enumerate(batch):
            codec.decode(codec.encode(1, i, 1 << 40, size))
        took = clock() - t
        best = took if best is None else min(best, took)
    return (best or 0) / len(batch) / 1000
