"""Turn aio-pika / aiormq failures into one readable line, never with a password.

Everything here is pure: it classifies an exception or describes it, the
callers decide which :mod:`mqlab.errors` type to raise.
"""

from __future__ import annotations

import asyncio
import errno
import socket

import aiormq.exceptions as amqp_exc
from yarl import URL

from mqlab.sdk import amqp
from mqlab.sdk.urls import mask

#: failures after which a fresh channel (and maybe a fresh connection) may succeed
_TRANSIENT: tuple[type[BaseException], ...] = (
    amqp_exc.AMQPConnectionError,  # includes ConnectionClosed
    amqp_exc.ChannelInvalidStateError,  # publish/ack on a channel that just died
    ConnectionError,
    OSError,
    # aiormq: "channel()" on a connection that closed a moment ago
    RuntimeError,
)


def check_url(url: str) -> str | None:
    """What is wrong with a broker URL, or None when it can be tried."""
    expected = "expected amqp://user:password@host:port/vhost"
    try:
        parsed = URL(url)
        _ = parsed.port  # yarl parses the port lazily
    except (TypeError, ValueError):
        return f"invalid broker URL: cannot parse it ({expected})"
    if parsed.scheme not in ("amqp", "amqps") or not parsed.host:
        return f"invalid broker URL {mask(url)} ({expected})"
    return None


class InvalidUrl(ValueError):
    """A URL this driver cannot even try (its text says why)."""


def is_transient(exc: BaseException) -> bool:
    """True when the failure is the connection or channel going away.

    A channel closed by the broker for a reason of its own (404, 403, 406) is
    not transient: republishing would fail the same way.
    """
    if isinstance(exc, amqp_exc.ChannelClosed):
        return not isinstance(
            exc,
            amqp_exc.ChannelNotFoundEntity
            | amqp_exc.ChannelAccessRefused
            | amqp_exc.ChannelPreconditionFailed,
        )
    return isinstance(exc, _TRANSIENT)


def describe(exc: BaseException) -> str:
    """A short reason for a non-connect failure (publish, declare, consume)."""
    if isinstance(exc, amqp_exc.DeliveryError):
        return str(exc)
    if isinstance(exc, amqp_exc.AMQPError) and exc.args:
        # aiormq puts (reply_code, reply_text) or a text in args; repr adds the class
        return " ".join(str(a) for a in exc.args if a is not None) or type(exc).__name__
    if isinstance(exc, asyncio.CancelledError | RuntimeError):
        # aiormq's text here is a repr of the connection or channel object
        return "the connection or channel was closed"
    return str(exc) or type(exc).__name__


def describe_connect_error(url: str, exc: BaseException, timeout: float) -> str:
    """Why the first connection to ``url`` failed, naming the problem and the fix."""
    if isinstance(exc, InvalidUrl):
        return str(exc)
    if isinstance(exc, amqp_exc.ProbableAuthenticationError | amqp_exc.AuthenticationError):
        return amqp.login_refused(url)
    if isinstance(exc, amqp_exc.InvalidFrameError) and "Connection.OpenOk" in str(exc):
        # the broker answers connection.open with connection.close: bad or forbidden vhost
        return amqp.vhost_refused(url)
    if isinstance(exc, amqp_exc.IncompatibleProtocolError):
        return amqp.not_amqp091()
    if isinstance(exc, TimeoutError):
        return amqp.no_handshake(timeout)
    cause = exc.__cause__ or exc
    if isinstance(cause, socket.gaierror):
        return "unknown host (check the host in the broker URL)"
    code = getattr(cause, "errno", None) or getattr(exc, "errno", None)
    if isinstance(cause, ConnectionRefusedError) or code == errno.ECONNREFUSED:
        return amqp.refused()
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror.lower()
    return describe(exc)
