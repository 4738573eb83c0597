"""Blocking client libraries in threads, bridged to the worker's event loop.

Some drivers mqlab compares are blocking: oslo.messaging's threading executor,
py-amqp. They run in threads of their own; this module is the one way across
to the asyncio side, so every such plugin pays the same bridge and no more:

- :class:`ThreadPool` runs a blocking function in one of ``size`` threads and
  awaits its result without blocking the loop (a ``ThreadPoolExecutor``);
- :func:`on_loop` wraps the core's handler so a library thread can call it:
  the handler runs on the loop's thread (the core's recorder is not
  thread-safe) while the calling thread waits for its reply;
- :func:`on_loop_each` does the same for a batch of messages with one
  crossing: a thread that reads several deliveries at once hands them over
  together, since each crossing (a wake-up write, thread switches, the GIL)
  can cost more CPU than the library's own work per message.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from mqlab.transport import Handler

T = TypeVar("T")

#: the handlers' replies, in order, up to the first that raised, and that exception
Outcome = tuple[list[bytes | None], Exception | None]
BatchHandler = Callable[[Sequence[bytes]], Outcome]


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
    each = on_loop_each(handler)

    def run(body: bytes) -> bytes | None:
        replies, error = each((body,))
        if error is not None:
            raise error
        return replies[0]

    return run


def on_loop_each(handler: Handler) -> BatchHandler:
    """``handler`` over a batch of bodies from any thread, with one crossing for the batch.

    The handler runs on the running loop for each body in order while the caller
    waits once. It returns the replies, and stops at a handler that raises: its
    exception comes back beside the replies before it, so the caller can still
    ack what was handled. Call it from a coroutine (it binds the running loop);
    called on the loop's own thread it runs at once.
    """
    loop = asyncio.get_running_loop()
    loop_thread = threading.get_ident()

    def each(bodies: Sequence[bytes]) -> Outcome:
        replies: list[bytes | None] = []
        try:
            for body in bodies:
                replies.append(handler(body))
        except Exception as exc:  # noqa: BLE001 - handed back with the replies before it
            return replies, exc
        return replies, None

    def run(bodies: Sequence[bytes]) -> Outcome:
        if threading.get_ident() == loop_thread:
            return each(bodies)
        done: concurrent.futures.Future[Outcome] = concurrent.futures.Future()
        loop.call_soon_threadsafe(lambda: done.set_result(each(bodies)))
        return done.result()

    return run
