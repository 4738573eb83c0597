"""Server URLs: credentials masked wherever a URL is shown or saved, endpoints by scheme.

Users paste URLs whose password is not percent-encoded (``amqp://u:p#ss/w@h/``);
``urllib`` would read ``#`` as a fragment and ``/`` as the path and then show
half the password. So the password is found here by the last ``@`` of the URL
instead: whatever the password holds, nothing of it is ever shown (at worst a
query that holds an ``@`` is masked too).
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

#: the port a URL means when it names none, by scheme: the schemes of the servers mqlab
#: manages itself, and every scheme a loaded plugin declares (:func:`declare`)
DEFAULT_PORTS: dict[str, int] = {
    "amqp": 5672,
    "amqps": 5671,
    "redis": 6379,
    "rediss": 6379,
    "nats": 4222,
    "tls": 4222,
    "mqtt": 1883,
    "mqtts": 8883,
    "kafka": 9092,
}
#: schemes whose URLs name no host and port (zmq's ``ipc://``), as plugins declare them
HOSTLESS: set[str] = set()


def declare(schemes: Mapping[str, int | None]) -> None:
    """Note a plugin's URL schemes (``Transport.url_schemes``): each default port, or None
    for a scheme whose URLs name no host (the registry calls it for every plugin loaded)."""
    for scheme, port in schemes.items():
        if port is None:
            HOSTLESS.add(scheme.lower())
        else:
            DEFAULT_PORTS[scheme.lower()] = port


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
    """Where ``url`` points: its host and port, the scheme's default port if it names none.

    ValueError when it names no port and its scheme has no default (a scheme no loaded
    plugin declares): guessing one would send the traffic, or a fault, somewhere else.
    """
    parts = _split(url)
    scheme = parts[0].lower() if parts else ""
    default = default_port or DEFAULT_PORTS.get(scheme)
    hostport = urlsplit(f"{scheme}://{parts[2]}") if parts else None
    try:
        port = hostport.port if hostport else None
    except ValueError:
        port = None
    port = port or default
    if port is None:
        raise ValueError(
            f"{mask(url)} names no port and no plugin loaded declares a default port for "
            f"{scheme or 'a URL without a scheme'}: add :PORT to the URL"
        )
    host = hostport.hostname if hostport else None
    return host or "127.0.0.1", port


def endpoint(url: str) -> str:
    """``host:port`` of ``url`` for messages (IPv6 in brackets), never a credential; the
    port ``?`` when the URL names none and its scheme has no default."""
    try:
        host, number = host_port(url)
        port = str(number)
    except ValueError:
        host, port = host_port(url, 1)[0], "?"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
