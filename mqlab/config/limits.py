"""What mqlab accepts: the limits of a profile and the checks of its values.

One layer for every number, size, name and URL a user gives, in a profile or on
the command line, so that a careless or hostile value is refused before
anything starts, with the limit named, instead of hanging, exhausting memory or
failing later with a traceback. Every check raises :class:`ValueError` with a
one-line problem; the profile reader adds the file and field. Every limit is
stated in docs/profiles.md.
"""

from __future__ import annotations

import math
import os
import re
import unicodedata
from urllib.parse import urlsplit

from mqlab import bounds
from mqlab.sdk.urls import DEFAULT_PORTS

#: the sizes a run can reach, which a results file's shape takes too (mqlab.bounds)
MAX_MESSAGE_BYTES = bounds.MAX_MESSAGE_BYTES
MAX_DURATION_S = bounds.MAX_DURATION_S
MAX_WAIT_S = bounds.MAX_WAIT_S
MAX_RATE = bounds.MAX_RATE
MAX_REPEAT = bounds.MAX_REPEAT
MAX_NODES = bounds.MAX_NODES
MAX_STEPS = bounds.MAX_STEPS
MAX_SERVERS = bounds.MAX_SERVERS
MAX_TARGETS = bounds.MAX_TARGETS
#: a profile is a hand-written file; anything larger is a mistake (or /dev/zero)
MAX_PROFILE_BYTES = 1024 * 1024
#: entries of a weighted message-size table
MAX_SIZE_TABLE = 1000
MAX_SCENARIOS = 100
#: values of one concurrency or rate list
MAX_LEVELS = 100
MAX_DRIVERS = 50
#: concurrent senders per client worker process (asyncio tasks and their connections)
MAX_CONCURRENCY_PER_PROCESS = 10_000
#: client worker processes per CPU core of this machine
MAX_PROCESSES_PER_CORE = 8
MAX_SHARED_TARGETS = bounds.MAX_SHARED_TARGETS
#: a fixed batch's messages (each is a bit in the servers' ledgers)
MAX_BATCH = 10_000_000
MAX_NAME_CHARS = 64
#: AMQP names are short strings (255 bytes); mqlab appends a run and step suffix
MAX_TOPIC_BYTES = 128
#: a URL scheme as RFC 3986 spells one; which schemes a driver takes is its plugin's to
#: declare (``Transport.url_schemes``), checked with the plugins (mqlab.config.check)
SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}")


#: TOML's integers are 64-bit signed (the TOML spec); tomllib reads any size, so mqlab checks
TOML_INT_MIN, TOML_INT_MAX = -(2**63), 2**63 - 1
#: a weight in a message_size table is a relative share
MAX_SIZE_WEIGHT = 1_000_000_000


def integers_in_range(value: object, where: str = "") -> tuple[str, str] | None:
    """``(field path, problem)`` for the first integer anywhere in a parsed profile that is
    outside TOML's 64-bit range, else None. Checked before any field converts a number:
    a 400-digit integer overflows ``float()``, a 5,000-digit one cannot even be printed."""
    if isinstance(value, int) and not isinstance(value, bool):
        if TOML_INT_MIN <= value <= TOML_INT_MAX:
            return None
        digits = value.bit_length() * 30103 // 100000 + 1  # about: str() may refuse it
        return where, (
            f"a whole number of about {digits:,} digits is outside TOML's 64-bit range "
            f"({TOML_INT_MIN:,} .. {TOML_INT_MAX:,})"
        )
    if isinstance(value, dict):
        for k, v in value.items():
            found = integers_in_range(v, f"{where}.{k}" if where else str(k))
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = integers_in_range(v, f"{where}[{i}]")
            if found:
                return found
    return None


def processes_limit() -> int:
    return MAX_PROCESSES_PER_CORE * (os.cpu_count() or 1)


def finite(value: float, what: str) -> float:
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"expected {what}, got {value!r}")
    return value


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.6g}"


def at_most(value: float, limit: float, what: str) -> None:
    if value > limit:
        raise ValueError(f"{what} {_number(value)} is above mqlab's limit of {_number(limit)}")


def _printable(text: str) -> str | None:
    """The first character a terminal would interpret (or hide), as a readable escape."""
    for ch in text:
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co"):
            return ascii(ch)
    return None


def name(text: str, what: str = "name", limit: int = MAX_NAME_CHARS) -> str:
    """A name shown in tables and file names: 1..limit printable characters."""
    if not text or not text.strip():
        raise ValueError(f"expected a non-empty {what}")
    if len(text) > limit:
        raise ValueError(f"{what} has {len(text)} characters; the limit is {limit}")
    bad = _printable(text)
    if bad:
        raise ValueError(f"{what} holds the control character {bad}; use printable text")
    return text


def topic(text: str, what: str = "name") -> str:
    """An exchange or topic: printable, no spaces, at most MAX_TOPIC_BYTES of UTF-8."""
    name(text, what, limit=MAX_TOPIC_BYTES)
    size = len(text.encode("utf-8"))
    if size > MAX_TOPIC_BYTES:
        raise ValueError(f"{what} is {size} bytes long; the limit is {MAX_TOPIC_BYTES}")
    if any(ch.isspace() for ch in text):
        raise ValueError(f"{what} holds a space; brokers' names do not")
    return text


def url(text: str) -> str:
    """A server URL: a well-formed scheme (a driver's plugin says which it takes), a host, a
    port in 1..65535."""
    shown = f"{text[:60]!r}" if "@" not in text else "the URL"
    bad = _printable(text)
    if bad or any(ch.isspace() for ch in text):
        raise ValueError(f"{shown} holds a space or control character {bad or ''}".rstrip())
    scheme, sep, rest = text.partition("://")
    if not sep or not scheme:
        raise ValueError("expected a URL like amqp://user:pass@host:5672/")
    if not SCHEME.fullmatch(scheme):
        raise ValueError(
            f"{scheme[:20]!r} is not a URL scheme (a letter, then letters, digits, '+', '-' "
            "or '.'), expected a URL like amqp://user:pass@host:5672/"
        )
    # the password may hold '#', '/', '?' or '@' unencoded: parse what follows the last '@'
    hostpart = rest.rpartition("@")[2]
    try:
        parts = urlsplit(f"{scheme}://{hostpart}")
        port = parts.port
    except ValueError as exc:
        # urllib's own words ("Port out of range 0-65535", "Invalid IPv6 URL") never hold
        # the userinfo, which was cut off above
        raise ValueError(f"bad host or port in {scheme}://…@{hostpart[:60]}: {exc}") from None
    if scheme.lower() in DEFAULT_PORTS and not parts.hostname:
        raise ValueError(f"no host in {scheme}://…@{hostpart[:60]}")
    if port == 0:
        raise ValueError(f"port 0 in {scheme}://…@{hostpart[:60]}; use 1..65535")
    return text


def http_url(text: str) -> str:
    """A management API's URL: http(s), a host, a port in 1..65535, no credentials (they are
    the AMQP URL's)."""
    bad = _printable(text)
    if bad or any(ch.isspace() for ch in text):
        raise ValueError(f"{text[:60]!r} holds a space or control character {bad or ''}".rstrip())
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"bad host or port in {text[:60]!r}: {exc}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError(f'expected a URL like "http://127.0.0.1:15672", got {text[:60]!r}')
    if "@" in parts.netloc:
        raise ValueError("no user or password here: the AMQP URL's are used")
    if port == 0:
        raise ValueError(f"port 0 in {text[:60]!r}; use 1..65535")
    return text


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: object) -> float:
    """``"20s"``, ``"500ms"``, ``"2m"``, ``"1h"`` or a number of seconds -> seconds."""
    if isinstance(value, bool):
        raise ValueError(f'expected a duration like "20s", "500ms" or "2m", got {value!r}')
    seconds: float | None = None
    if isinstance(value, int | float):
        seconds = finite(float(value), "a finite duration")
        if seconds < 0:
            raise ValueError(f"expected a duration >= 0, got {value!r}")
    elif isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            seconds = float(m.group(1)) * _UNIT[m.group(2)]
    if seconds is None:
        shown = repr(value)[:40]
        raise ValueError(f'expected a duration like "20s", "500ms" or "2m", got {shown}')
    at_most(seconds, MAX_DURATION_S, "duration (s)")
    return seconds
