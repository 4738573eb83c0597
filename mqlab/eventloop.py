"""The one place uvloop enters: every process runs its main coroutine through here."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    try:
        import uvloop
    except ImportError:  # uvloop is a dependency; stay usable where it cannot build
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main())
