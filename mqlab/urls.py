"""Broker URLs: credentials are masked wherever a URL is shown or saved."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def mask(url: str) -> str:
    """``amqp://guest:guest@h:5672/`` -> ``amqp://guest:***@h:5672/``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def host_port(url: str, default_port: int = 5672) -> tuple[str, int]:
    parts = urlsplit(url)
    try:
        port = parts.port or default_port
    except ValueError:
        port = default_port
    return parts.hostname or "127.0.0.1", port
