"""mqlab.threads: a library thread calls the core's handler, which runs on the event loop."""

from __future__ import annotations

import threading

import pytest

from mqlab.threads import ThreadPool, on_loop


async def test_a_library_thread_gets_the_reply_computed_on_the_loop() -> None:
    seen: list[int] = []

    def handler(body: bytes) -> bytes:
        seen.append(threading.get_ident())
        return body.upper()

    bridged = on_loop(handler)
    pool = ThreadPool(2, "t")
    try:
        assert await pool.run(bridged, b"abc") == b"ABC"
    finally:
        pool.shutdown()
    # the core's recording is not thread-safe: the handler ran on the loop's thread
    assert seen == [threading.get_ident()]


async def test_a_failing_handler_raises_in_the_calling_thread() -> None:
    def handler(body: bytes) -> bytes:
        raise ValueError("bad body")

    pool = ThreadPool(1, "t")
    try:
        with pytest.raises(ValueError, match="bad body"):
            await pool.run(on_loop(handler), b"x")
    finally:
        pool.shutdown()
