"""Blocking client libraries in threads, bridged to the worker's event loop.

Some drivers mqlab compares are blocking: oslo.messaging's threading executor,
py-amqp. They run in threads of their own; this module is the one way across
to the asyncio side, so every such plugin pays the same bridge and no more:

- :class:`ThreadPool` runs a blocking function in one of ``size`` threads and
  awaits its result without blocking the loop (a ``ThreadPoolExecutor``);
- :func:`on_loop` wraps the core's handler so a library thread can call it:
  the handler runs on the loop's thread (the core's recorder is not
  thread-safe) while the calling thread waits for its reply.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import threading
from collections.abc import Callable
from typing import TypeVar

from mqlab.transport import Handler

T = TypeVar("T")


class ThreadPool:
    """``size`` threads named after ``name``; ``run`` awaits a blocking call in one of them."""

    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self._pool = concurrent.futures.ThreadPoolExecutor(size, thread_name_prefix=name)

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        return await loop.run_in_executor(self._pool, call)

    def shutdown(self) -> None:
        """Stop taking work; running calls finish in their threads (never waited for)."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def on_loop(handler: Handler) -> Handler:
    """``handler`` callable from any thread: it runs on the running loop, the caller waits.

    Call it from a coroutine (it binds the running loop). Called on the loop's
    own thread the handler runs at once. A handler that raises raises in the
    calling thread, as it would have in place.
    """
    loop = asyncio.get_running_loop()
    loop_thread = threading.get_ident()

    def run(body: bytes) -> bytes | None:
        if threading.get_ident() == loop_thread:
            return handler(body)
        done: concurrent.futures.Future[bytes | None] = concurrent.futures.Future()

        def call() -> None:
            try:
                done.set_result(handler(body))
            except Exception as exc:  # noqa: BLE001 - raised again in the calling thread
                done.set_exception(exc)

        loop.call_soon_threadsafe(call)
        return done.result()

    return run
