"""Server URLs: credentials masked wherever a URL is shown or saved, endpoints by scheme.

Users paste URLs whose password is not percent-encoded (``amqp://u:p#ss/w@h/``);
``urllib`` would read ``#`` as a fragment and ``/`` as the path and then show
half the password. So the password is found here by the last ``@`` of the URL
instead: whatever the password holds, nothing of it is ever shown (at worst a
query that holds an ``@`` is masked too).
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

#: the port a URL means when it names none, by scheme
DEFAULT_PORTS: dict[str, int] = {
    "amqp": 5672,
    "amqps": 5671,
    "redis": 6379,
    "rediss": 6379,
    "nats": 4222,
    "tls": 4222,
    "mqtt": 1883,
    "mqtts": 8883,
    "tcp": 5672,
    "kafka": 9092,
}
#: the port of a URL without a scheme mqlab knows
FALLBACK_PORT = 5672


def _split(url: str) -> tuple[str, str | None, str] | None:
    """``(scheme, userinfo or None, the rest after the userinfo)``; None without ``://``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return None
    userinfo, at, after = rest.rpartition("@")
    return (scheme, userinfo, after) if at else (scheme, None, rest)


def mask(url: str) -> str:
    """``amqp://guest:guest@h:5672/`` -> ``amqp://guest:***@h:5672/``; no password, no change."""
    parts = _split(url)
    if parts is None:
        return url
    scheme, userinfo, rest = parts
    if userinfo is None:
        return url
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}@{rest}"


def password(url: str) -> str | None:
    """The password ``url`` carries (percent-decoded), or None."""
    parts = _split(url)
    if parts is None or parts[1] is None or ":" not in parts[1]:
        return None
    return unquote(parts[1].partition(":")[2])


def hide_secret(text: str, url: str) -> str:
    """Remove ``url``'s password from ``text``, a library's message that may echo it."""
    secret = password(url)
    if not secret:
        return text
    raw = _split(url)
    assert raw is not None and raw[1] is not None
    for form in {raw[1].partition(":")[2], secret}:
        text = text.replace(form, "***")
    return text


def host_port(url: str, default_port: int | None = None) -> tuple[str, int]:
    """Where ``url`` points: its host and port, the scheme's default port if it names none."""
    parts = _split(url)
    scheme = parts[0].lower() if parts else ""
    default = default_port or DEFAULT_PORTS.get(scheme, FALLBACK_PORT)
    if parts is None:
        return "127.0.0.1", default
    hostport = urlsplit(f"{scheme}://{parts[2]}")
    try:
        port = hostport.port or default
    except ValueError:
        port = default
    return hostport.hostname or "127.0.0.1", port


def endpoint(url: str) -> str:
    """``host:port`` of ``url`` for messages (IPv6 in brackets), never a credential."""
    host, port = host_port(url)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
