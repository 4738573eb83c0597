"""A coroutine started at once, made a Task only if it suspends (Python 3.12's eager tasks).

The open loop starts one send per message: most casts complete without suspending, and a
Task for each would cost more than the send. Kept out of the compiled hot modules
(mqlab/native.py): the hand-over below is a generator-based coroutine, which only the
interpreter makes.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Coroutine, Generator
from typing import Any


def start_eagerly(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
    """Run ``coro`` now; a Task only if it suspends. A send that does suspend carries
    on in a Task, which resumes it exactly where it stopped."""
    try:
        yielded = coro.send(None)
    except StopIteration:
        return None
    return asyncio.ensure_future(_resume(coro, yielded))


@types.coroutine
def _resume(coro: Coroutine[Any, Any, None], yielded: Any) -> Generator[Any, Any, None]:
    # hands the Task what the coroutine awaits, and the Task's answers (a result, a
    # cancellation) back to the coroutine: the Task drives it as if it had started it
    while True:
        try:
            value = yield yielded
        except BaseException as exc:  # noqa: BLE001 - thrown into the coroutine, as a Task would
            try:
                yielded = coro.throw(exc)
            except StopIteration:
                return
        else:
            try:
                yielded = coro.send(value)
            except StopIteration:
                return
