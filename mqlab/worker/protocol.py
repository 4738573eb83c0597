"""The control channel between the controller and its workers.

Length-prefixed msgpack frames over a TCP stream on loopback: the same whether
a worker is a local process or, later, an agent on another host. Every frame
is a dict with a ``type``:

| from | type | meaning |
|---|---|---|
| worker | ``hello`` | connected: ``worker``, ``pid`` |
| controller | ``spec`` | the :class:`~mqlab.config.plan.WorkerSpec` as a dict |
| worker | ``ready`` / ``error`` | transport started and serving / why not (``message``, ``kind``) |
| controller | ``go`` | ``t0``, ``start``, ``window_start``, ``window_end`` (monotonic ns) |
| worker | ``snapshot`` | counters, series and histogram so far (every second) |
| worker | ``done`` | clients: every send finished or timed out |
| controller | ``stop`` | stop sending now (Ctrl-C) |
| controller | ``snap`` | send a snapshot now (the drain polls with it) |
| controller | ``finish`` | report and exit |
| controller | ``retire`` | rolling update, graceful: stop, finish in hand, close, report, exit |
| controller | ``close-old`` | rolling update across wire families: close the old transport |
| worker | ``closed-old`` | the old transport is closed: it serves on the new one only |
| worker | ``final`` | the last snapshot (receipts are in the ledger files) |
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import msgpack

_HEADER = struct.Struct("!I")
MAX_FRAME = 256 * 1024 * 1024


async def send(writer: asyncio.StreamWriter, msg: dict[str, Any]) -> None:
    data = msgpack.packb(msg, use_bin_type=True)
    writer.write(_HEADER.pack(len(data)) + data)
    await writer.drain()


async def recv(reader: asyncio.StreamReader) -> dict[str, Any]:
    """One frame; raises ``asyncio.IncompleteReadError`` when the peer went away."""
    return decode(await recv_raw(reader))


async def recv_raw(reader: asyncio.StreamReader) -> bytes:
    """One frame's bytes, undecoded (a host's supervisor relays them as they are)."""
    (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    if size > MAX_FRAME:
        raise ValueError(f"control frame of {size} bytes is too large")
    return await reader.readexactly(size)


def decode(data: bytes) -> dict[str, Any]:
    msg = msgpack.unpackb(data, raw=False, strict_map_key=False)
    if not isinstance(msg, dict):
        raise ValueError("control frame is not a map")
    return msg
