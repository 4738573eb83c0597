"""What the tests of the threaded drivers (oslo, pyamqp) share."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from mqlab.transport import Transport, TransportConfig

Make = Callable[..., Awaitable[Transport]]


class Got:
    """A server handler: records every body, replies ``re:<body>`` (ignored for casts)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def __call__(self, body: bytes) -> bytes:
        self.bodies.append(body)
        return b"re:" + body


async def starter(url: str, default: type[Transport]) -> AsyncIterator[Make]:
    """A fixture body: ``make(worker, cls=default, **options)`` starts transports, closed after."""
    made: list[Transport] = []

    async def make(worker: str, cls: type[Transport] = default, **options: Any) -> Transport:
        transport = cls(TransportConfig((url,), options, worker))
        await transport.start()
        made.append(transport)
        return transport

    yield make
    for transport in made:
        await transport.aclose()
