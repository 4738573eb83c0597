"""Broker URLs: pika connection parameters, masked display, readable connect errors."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import pika
import pika.exceptions
from pika.adapters.utils import connection_workflow as workflow

from mqlab.sdk import amqp
from mqlab.sdk.amqp import BROKER_HINT
from mqlab.sdk.urls import hide_secret
from mqlab_pika.options import Settings


def parameters(url: str, settings: Settings, name: str, timeout: float) -> pika.URLParameters:
    """Connection parameters for one URL; raises ValueError for a malformed URL."""
    scheme = urlsplit(url).scheme.lower()
    if scheme not in ("amqp", "amqps"):
        raise ValueError(f"scheme {scheme or 'missing'!r}: expected amqp:// or amqps://")
    params = pika.URLParameters(url)
    params.heartbeat = settings.heartbeat
    if settings.tcp_user_timeout > 0:
        params.tcp_options = {"TCP_USER_TIMEOUT": max(1, int(settings.tcp_user_timeout * 1000))}
    # one attempt per URL: failover across the list is ours, not pika's retry loop
    params.connection_attempts = 1
    params.retry_delay = 0
    params.socket_timeout = max(0.1, min(timeout, 5.0))
    params.stack_timeout = max(0.1, timeout)
    params.client_properties = {"connection_name": name}
    return params


def _root(exc: BaseException) -> BaseException:
    """The innermost cause pika wrapped in its connection-workflow errors."""
    seen = 0
    while seen < 8:
        seen += 1
        if isinstance(exc, workflow.AMQPConnectionWorkflowFailed) and exc.exceptions:
            exc = exc.exceptions[-1]
        elif isinstance(exc, workflow.AMQPConnectorPhaseErrorBase):
            exc = exc.exception
        elif (
            type(exc) is pika.exceptions.AMQPConnectionError
            and exc.args
            and isinstance(exc.args[0], BaseException)
        ):
            exc = exc.args[0]
        else:
            break
    return exc


def describe_connect_error(exc: BaseException, url: str) -> str:
    """One line: why connecting to ``url`` failed and what to do about it."""
    root = _root(exc)
    if isinstance(
        root, pika.exceptions.ProbableAuthenticationError | pika.exceptions.AuthenticationError
    ):
        why = amqp.login_refused(url)
    elif isinstance(root, pika.exceptions.ProbableAccessDeniedError):
        why = amqp.vhost_refused(url)
    elif isinstance(root, ConnectionRefusedError):
        why = amqp.refused()
    elif isinstance(root, socket.gaierror):
        why = f"host name not found: {root.strerror or root} (check the host in the URL)"
    elif isinstance(root, TimeoutError | workflow.AMQPConnectorStackTimeout):
        why = f"timed out ({BROKER_HINT}; is the host reachable?)"
    elif isinstance(
        root, pika.exceptions.StreamLostError | pika.exceptions.IncompatibleProtocolError
    ):
        why = (
            "the peer closed the connection during the AMQP handshake (is this an AMQP 0-9-1 port?)"
        )
    elif isinstance(root, pika.exceptions.ConnectionOpenAborted):
        why = "no AMQP handshake in time (is this an AMQP 0-9-1 port? is the broker overloaded?)"
    elif isinstance(root, pika.exceptions.ConnectionClosedByBroker):
        why = f"closed by the broker: {root.reply_code} {hide_secret(root.reply_text, url)}"
    elif isinstance(root, OSError):
        why = f"{hide_secret(str(root.strerror or root), url)} ({BROKER_HINT})"
    else:
        detail = hide_secret(str(root), url) or type(root).__name__
        why = f"{type(root).__name__}: {detail}"
    # only library text went through hide_secret: the user name may equal the password
    return why
