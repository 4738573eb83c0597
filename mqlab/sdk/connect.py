"""Connect to the first server URL that answers: one loop, one set of messages.

A driver gives the way it opens one URL and the way it explains a failure;
this module tries the URLs in order within a budget and raises one
:class:`ConnectFailed` naming every URL (masked) and why each failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from mqlab.errors import ConnectFailed
from mqlab.sdk.urls import hide_secret, mask
from mqlab.transport import CONNECT_TIMEOUT

T = TypeVar("T")

#: the shared ``connect_timeout`` option (:data:`mqlab.transport.CONNECT_TIMEOUT`), here beside
#: the loop whose ``per_url`` it is
__all__ = ["CONNECT_TIMEOUT", "connect_failed", "connect_first", "explain", "no_url"]

#: the one message for a driver given no URL at all
NO_URL = (
    "no server URL given: set url (or urls) in the driver's [drivers.NAME] table "
    "or [broker] url in the profile, or pass --broker URL"
)


def no_url() -> ConnectFailed:
    return ConnectFailed(NO_URL)


def explain(url: str, exc: BaseException, timeout: float) -> str:
    """The reason of one failed attempt: a timeout, or the library's words, password removed.

    A driver whose library says more than its exception (or says it elsewhere) wraps this.
    """
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g}s"
    return hide_secret(f"{type(exc).__name__}: {exc}", url)


def connect_failed(urls: Sequence[str], reasons: Sequence[str]) -> ConnectFailed:
    """One line: every URL tried (masked) and why it failed."""
    lines = "; ".join(f"{mask(u)}: {why}" for u, why in zip(urls, reasons, strict=True))
    if len(urls) == 1:
        return ConnectFailed(f"cannot connect to {lines}")
    return ConnectFailed(f"cannot connect to any of {len(urls)} URLs: {lines}")


async def connect_first(
    urls: Sequence[str],
    open_url: Callable[[str, float], Awaitable[T]],
    explain: Callable[[str, BaseException, float], str],
    *,
    per_url: float,
    budget: float | None = None,
    start: int = 0,
) -> tuple[int, T]:
    """``(index, connection)`` of the first URL ``open_url(url, timeout)`` opens.

    URLs are tried in order from ``start`` (wrapping), each for at most
    ``per_url`` seconds and all together for ``budget`` (by default ``per_url``
    for each URL); ``open_url`` running
    longer than its timeout counts as a ``TimeoutError``. ``explain(url, exc,
    timeout)`` gives the reason of one failure (without the URL; no password).
    """
    if not urls:
        raise no_url()
    if budget is None:
        budget = per_url * len(urls)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget
    tried: list[str] = []
    reasons: list[str] = []
    last: BaseException | None = None
    for step in range(len(urls)):
        index = (start + step) % len(urls)
        url = urls[index]
        timeout = min(per_url, deadline - loop.time())
        if timeout <= 0:
            break
        try:
            async with asyncio.timeout(timeout):
                return index, await open_url(url, timeout)
        except Exception as exc:  # noqa: BLE001 - each failure becomes one line of the error
            tried.append(url)
            reasons.append(explain(url, exc, timeout))
            last = exc
    if not tried:
        tried, reasons = [urls[start % len(urls)]], [f"no time left within {budget:g}s"]
    raise connect_failed(tried, reasons) from last
