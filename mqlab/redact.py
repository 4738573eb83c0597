"""Secrets kept out of every output: screen, results file, error lines and logs.

Two layers, both applied wherever text leaves mqlab:

- structured values are masked where they are known: every URL (whatever
  characters its password holds, see :func:`mqlab.sdk.urls.mask`) and every driver
  option whose value is a URL or whose name says it is a secret;
- free text (a library's error message, a worker's last words, a log record)
  is scrubbed of every password the run's profile holds, raw and
  percent-decoded, and of the userinfo of any URL it quotes.

The passwords are remembered once, when the profile is read
(:func:`remember`), so the error line of a command that fails much later is
still scrubbed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

from mqlab.sdk.urls import mask, password

#: option names whose values are secrets whatever they look like
SECRET_NAME = re.compile(r"pass(word|wd)?|secret|token|credential|api_?key|auth", re.IGNORECASE)
#: a URL quoted in free text: up to the next whitespace or quote
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
#: shorter secrets are masked inside URLs but not searched for in free text,
#: where they would also match ordinary words and numbers
MIN_SCRUB = 3
MASK = "***"

_secrets: set[str] = set()


def is_secret_name(key: str) -> bool:
    return bool(SECRET_NAME.search(key))


def option_value(key: str, value: Any) -> Any:
    """A driver option as it may be shown or saved."""
    if is_secret_name(key) and value not in (None, "", False):
        return MASK
    if isinstance(value, str):
        return mask(value) if "://" in value else value
    if isinstance(value, list | tuple):
        return [option_value(key, v) for v in value]
    if isinstance(value, dict):
        return {k: option_value(str(k), v) for k, v in value.items()}
    return value


def remember_values(values: Iterable[tuple[str, Any]]) -> None:
    """Note the secrets among ``(name, value)`` pairs: URL passwords, secret-named options."""
    for key, value in values:
        if isinstance(value, list | tuple):
            remember_values((key, v) for v in value)
        elif isinstance(value, dict):
            remember_values((str(k), v) for k, v in value.items())
        elif isinstance(value, str):
            if "://" in value:
                secret = password(value)
                # a password equal to the user name (guest:guest) is shown with the user
                # anyway; scrubbing it would hide every user name in every message
                if secret and secret != unquote(_userinfo(value).partition(":")[0]):
                    _secrets.update({secret, unquote(secret), _raw_password(value)})
            elif is_secret_name(key) and value:
                _secrets.add(value)


def _userinfo(url: str) -> str:
    return url.partition("://")[2].rpartition("@")[0]


def _raw_password(url: str) -> str:
    return _userinfo(url).partition(":")[2]


def remember(urls: Iterable[str], options: Iterable[tuple[str, Any]] = ()) -> None:
    remember_values([("url", u) for u in urls])
    remember_values(options)


def scrub(text: str) -> str:
    """Free text with every remembered secret and every quoted URL's password masked."""
    text = _URL_IN_TEXT.sub(lambda m: mask(m.group()), text)
    for secret in sorted(_secrets, key=len, reverse=True):
        if len(secret) >= MIN_SCRUB:
            text = text.replace(secret, MASK)
    return text


class ScrubLogs(logging.Filter):
    """A log filter that scrubs every record's message before any handler sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = scrub(record.getMessage())
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


def scrub_logs() -> None:
    """Send log records (WARNING and up) to stderr through :class:`ScrubLogs`."""
    root = logging.getLogger()
    if any(isinstance(f, ScrubLogs) for h in root.handlers for f in h.filters):
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("mqlab: %(name)s: %(message)s"))
    handler.addFilter(ScrubLogs())
    root.addHandler(handler)
    if root.level == logging.NOTSET:
        root.setLevel(logging.WARNING)
