"""nats-py's exceptions as mqlab's: one table for every send and every subscribe."""

from __future__ import annotations

import nats.errors
import nats.js.errors

from mqlab.errors import (
    ConnectionLost,
    DriverError,
    ErrorRule,
    Undeliverable,
)

RULES: list[ErrorRule] = [
    (
        nats.errors.NoRespondersError,
        lambda _e: Undeliverable("no responders: nobody subscribes to this subject"),
    ),
    (
        nats.js.errors.NoStreamResponseError,
        lambda _e: Undeliverable("no JetStream stream takes this subject (no durable listener)"),
    ),
    (
        nats.errors.MaxPayloadError,
        lambda e: DriverError(f"message larger than the server's max_payload: {e}"),
    ),
    (
        (
            nats.errors.ConnectionClosedError,
            nats.errors.ConnectionDrainingError,
            nats.errors.StaleConnectionError,
            nats.errors.UnexpectedEOF,
            nats.errors.OutboundBufferLimitError,
            nats.errors.NoServersError,
            ConnectionError,
        ),
        lambda e: ConnectionLost(f"NATS connection lost: {type(e).__name__} {e}".strip()),
    ),
    (nats.errors.Error, lambda e: DriverError(f"nats: {type(e).__name__}: {e}")),
]
