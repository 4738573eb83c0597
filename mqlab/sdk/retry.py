"""Sending again after a lost connection, as far as the driver's ``retry`` option allows.

A send whose connection failed under it may or may not have reached the server. Sending it
again may duplicate it; not sending it may lose it. Drivers differ exactly there, and mqlab
compares them: ``retry`` says how many times to resend (None or -1: until it goes through;
0: never, the at-most-once rule, and the only value that may claim ``at_most_once``). Every
driver counts and words it the same way with :func:`send`, and declares the option with
:data:`RETRY`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from mqlab.errors import ConnectionLost
from mqlab.transport import Option

T = TypeVar("T")

#: the shared ``retry`` option; ``retry = 0`` asks for ``Features.at_most_once``
RETRY = Option(
    (int,), None,
    "resends of a message whose connection was lost (none or -1: until it goes through; "
    "0: never, at most once)",
    allow_none=True, minimum=-1, feature="at_most_once", needs=(0,),
)  # fmt: skip


def resends_left(retry: int | None, resent: int) -> bool:
    """True while a send resent ``resent`` times may be resent once more."""
    return retry is None or retry < 0 or resent < retry


async def send(
    attempt: Callable[[], Awaitable[T]],
    *,
    retry: int | None,
    lost: tuple[type[BaseException], ...],
    reconnected: Callable[[], Awaitable[object]],
    what: str,
) -> T:
    """``attempt()``; when it meets a lost connection (an error of ``lost``), wait for
    ``reconnected()`` and attempt again, ``retry`` times at most. Then one
    :class:`ConnectionLost`: ``"<what> failed: <why> (retry=N: not resent)"`` or ``"...
    gave up after N resends)"``. ``reconnected()`` raising ``lost`` spends an attempt."""
    resent = 0
    while True:
        try:
            return await attempt()
        except lost as exc:
            if not resends_left(retry, resent):
                spent = "not resent" if resent == 0 else f"gave up after {resent} resend(s)"
                raise ConnectionLost(f"{what} failed: {exc} (retry={retry}: {spent})") from exc
        resent += 1
        try:
            await reconnected()
        except lost:
            continue
