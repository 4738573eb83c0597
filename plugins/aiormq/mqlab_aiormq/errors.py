"""Turning aiormq's exceptions into mqlab's, with one readable line each.

Nothing from aiormq or pamqp leaves the plugin: every boundary calls one of
these and raises the result ``from`` the original. No message carries a
password: URLs are shown masked.
"""

from __future__ import annotations

import asyncio

import aiormq
import aiormq.exceptions as aex

from mqlab.errors import ConnectionLost, DriverError, TransportError, Undeliverable
from mqlab.sdk import amqp


def connect_failure(url: str, exc: BaseException, timeout: float) -> str:
    """Why connecting to ``url`` failed and what to do, in one line (no ``cannot`` prefix)."""
    if isinstance(exc, aex.ProbableAuthenticationError | aex.AuthenticationError):
        return amqp.login_refused(url)
    if isinstance(exc, aex.InvalidFrameError) and "Connection.Close" in str(exc):
        # aiormq reports the broker's close of Connection.Open as an unexpected
        # frame; the only reason RabbitMQ closes there is the virtual host
        return amqp.vhost_refused(url)
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return amqp.no_handshake(timeout)
    if isinstance(exc, aex.IncompatibleProtocolError | aex.ProtocolSyntaxError):
        return amqp.not_amqp091()
    if isinstance(exc, aex.ConnectionClosed):
        return f"the broker closed the connection during the handshake: {exc.args!r}"
    errno = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    if errno == 111 or isinstance(exc, ConnectionRefusedError):
        return amqp.refused()
    if isinstance(exc, OSError):
        reason = exc.args[1] if len(exc.args) > 1 else str(exc)
        return f"{reason} ({amqp.BROKER_HINT})"
    return f"{type(exc).__name__}: {exc}"


def runtime(exc: BaseException, what: str, connection_open: bool) -> TransportError:
    """Map an error raised while moving messages; ``what`` names the operation."""
    if isinstance(exc, TransportError):
        return exc
    if isinstance(exc, aex.PublishError):
        frame = exc.frame
        key = getattr(frame, "routing_key", "?")
        exchange = getattr(frame, "exchange", "?")
        return Undeliverable(
            f"{what}: nobody listens on exchange {exchange!r} with routing key {key!r} "
            "(start a server for this target first)"
        )
    if isinstance(exc, aex.DeliveryError):
        return DriverError(f"{what}: the broker refused the message (basic.nack); retry later")
    if not connection_open or isinstance(exc, aex.AMQPConnectionError | ConnectionError):
        return ConnectionLost(
            f"{what}: the connection to the broker was lost ({type(exc).__name__}); "
            "the transport reconnects"
        )
    if isinstance(exc, aex.ChannelPreconditionFailed):
        return DriverError(
            f"{what}: the broker refused a declaration ({_reason(exc)}); an existing exchange "
            "or queue has other arguments: delete it or use another name"
        )
    if isinstance(exc, aex.ChannelNotFoundEntity):
        return DriverError(f"{what}: {_reason(exc)} (declare it first or check the target)")
    if isinstance(exc, aex.ChannelAccessRefused):
        return DriverError(f"{what}: access refused ({_reason(exc)}); check the user's permissions")
    if isinstance(exc, aex.ChannelClosed | aex.ChannelInvalidStateError):
        return DriverError(f"{what}: the channel was closed ({_reason(exc)})")
    if isinstance(exc, aiormq.AMQPError):
        return DriverError(f"{what}: {type(exc).__name__}: {_reason(exc)}")
    return DriverError(f"{what}: {type(exc).__name__}: {exc}")


def _reason(exc: BaseException) -> str:
    args = [a for a in exc.args if a is not None]
    return " ".join(str(a) for a in args) or type(exc).__name__
