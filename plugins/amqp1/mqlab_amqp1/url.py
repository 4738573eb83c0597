"""Broker URLs: ``amqp://user:pass@host:port/vhost`` parsed once, masked for messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import quote, unquote, urlsplit

from mqlab.errors import ConnectFailed

DEFAULT_PORT = 5672


@dataclass(frozen=True, slots=True)
class BrokerUrl:
    """Where and as whom to connect. ``password`` never appears in ``repr`` or messages."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    #: ``None``: the broker's default virtual host
    vhost: str | None

    @property
    def masked(self) -> str:
        """The URL as shown to a user: the password replaced by ``***``."""
        vhost = "" if self.vhost is None else quote(self.vhost, safe="")
        return f"amqp://{quote(self.user, safe='')}:***@{self.host}:{self.port}/{vhost}"

    @property
    def amqp_hostname(self) -> str:
        """The ``hostname`` of the AMQP open frame.

        RabbitMQ reads a virtual host from it when it is written ``vhost:NAME``;
        without a vhost in the URL the broker's ``default_vhost`` applies.
        """
        return self.host if self.vhost is None else f"vhost:{self.vhost}"

    @property
    def amqp091(self) -> str:
        """The same broker as an AMQP 0-9-1 URL (same port, credentials, vhost)."""
        vhost = quote(self.vhost if self.vhost is not None else "/", safe="")
        user = quote(self.user, safe="")
        password = quote(self.password, safe="")
        return f"amqp://{user}:{password}@{self.host}:{self.port}/{vhost}"


def parse_url(url: str) -> BrokerUrl:
    """Parse an ``amqp://`` URL; missing credentials default to guest/guest like 0-9-1 clients."""
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORT
    except ValueError as exc:
        expected = "expected amqp://user:pass@host:port/"
        raise ConnectFailed(f"bad broker URL: {exc} ({expected})") from exc
    if parts.scheme != "amqp":
        scheme = parts.scheme or "none"
        raise ConnectFailed(
            f"unsupported URL scheme {scheme!r} for the amqp1 plugin (use amqp://user:pass@host:port/)"
        )
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    return BrokerUrl(
        host=parts.hostname or "localhost",
        port=port,
        user=unquote(parts.username) if parts.username is not None else "guest",
        password=unquote(parts.password) if parts.password is not None else "guest",
        vhost=unquote(path) if path else None,
    )
