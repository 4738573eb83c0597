"""mqlab.sdk.threads: a library thread calls the core's handler, which runs on the event loop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any
from unittest import mock

import pytest

from mqlab.sdk.threads import ThreadPool, on_loop, on_loop_each


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


async def test_a_batch_crosses_once_and_its_replies_come_back_in_order() -> None:
    seen: list[int] = []

    def handler(body: bytes) -> bytes:
        seen.append(threading.get_ident())
        return body.upper()

    loop = asyncio.get_running_loop()
    crossings = 0
    cross = loop.call_soon_threadsafe

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal crossings
        crossings += 1
        return cross(*args, **kwargs)

    each = on_loop_each(handler)
    pool = ThreadPool(1, "t")
    try:
        with mock.patch.object(loop, "call_soon_threadsafe", counted):
            await pool.run(each, [b"a"])
            one, crossings = crossings, 0
            replies, error = await pool.run(each, [b"a", b"b", b"c"])
    finally:
        pool.shutdown()
    assert (replies, error) == ([b"A", b"B", b"C"], None)
    # the three cross as one does (the pool's own reply to the loop is counted in both)
    assert crossings == one
    assert seen == [threading.get_ident()] * 4


async def test_a_failing_handler_ends_the_batch_and_keeps_the_replies_before_it() -> None:
    """A thread acks what was handled before a handler raised, so those come back."""
    handled: list[bytes] = []

    def handler(body: bytes) -> bytes:
        if body == b"bad":
            raise ValueError("bad body")
        handled.append(body)
        return body

    pool = ThreadPool(1, "t")
    try:
        replies, error = await pool.run(on_loop_each(handler), [b"a", b"bad", b"c"])
    finally:
        pool.shutdown()
    assert replies == [b"a"]
    assert isinstance(error, ValueError)
    assert handled == [b"a"]  # nothing after the failure ran
