"""The driver-neutral helpers plugins share: pending calls, connect loop, error table."""

from __future__ import annotations

import asyncio

import pytest

from mqlab.errors import (
    CallTimeout,
    ConnectFailed,
    ConnectionLost,
    DriverError,
    Undeliverable,
    map_errors,
    mapped,
)
from mqlab.sdk.connect import NO_URL, connect_first
from mqlab.sdk.pending import PendingCalls
from mqlab.transport import Target

TARGET = Target("ex", "topic", "s1")


async def test_a_reply_reaches_its_call_and_a_late_one_is_dropped() -> None:
    calls = PendingCalls()
    async with calls.waiting("c1", TARGET, 1.0) as fut:
        assert calls.resolve("c1", b"pong")
        assert await fut == b"pong"
    assert len(calls) == 0
    assert not calls.resolve("c1", b"late")


async def test_a_call_without_reply_times_out_with_the_target_named() -> None:
    calls = PendingCalls()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(CallTimeout, match=r"no reply from 'ex/topic\.s1' within 0\.2s"):
        async with calls.waiting("c1", TARGET, 0.2) as fut:
            await fut
    assert loop.time() - t0 < 0.2 + 1.0
    assert "c1" not in calls


async def test_losing_the_connection_rejects_every_waiting_call() -> None:
    calls = PendingCalls()
    futs = [calls.expect(f"c{i}") for i in range(3)]
    calls.reject_all()
    for fut in futs:
        with pytest.raises(ConnectionLost):
            async with asyncio.timeout(2):  # not failed at once would be a TimeoutError
                await fut
    assert len(calls) == 0


async def test_closing_fails_a_waiting_call_saying_the_transport_closed() -> None:
    calls = PendingCalls()
    with pytest.raises(ConnectionLost, match="the transport closed while waiting for a reply"):
        async with calls.waiting("c1", TARGET, 5.0) as fut:
            calls.close()
            await fut
    assert len(calls) == 0


async def test_connect_first_gives_each_url_per_url_seconds_by_default() -> None:
    async def hang(url: str, timeout: float) -> str:
        await asyncio.sleep(10)
        return url

    # without a budget, the second URL still gets its own 0.2 s after the first hung
    with pytest.raises(ConnectFailed) as err:
        await connect_first(
            ["amqp://a", "amqp://b"], hang, lambda u, e, t: "timed out", per_url=0.2
        )
    assert "amqp://a" in str(err.value) and "amqp://b" in str(err.value)


async def test_connect_first_uses_the_first_url_that_answers() -> None:
    async def open_url(url: str, timeout: float) -> str:
        if "bad" in url:
            raise ConnectionRefusedError(111, "refused")
        return f"conn to {url}"

    index, conn = await connect_first(
        ["amqp://u:pw@bad/", "amqp://u:pw@good/"],
        open_url,
        lambda u, e, t: "x",
        per_url=1,
        budget=2,
    )
    assert (index, conn) == (1, "conn to amqp://u:pw@good/")


async def test_connect_first_names_every_url_masked_and_why() -> None:
    async def never(url: str, timeout: float) -> str:
        if "slow" in url:
            await asyncio.sleep(10)
        raise ConnectionRefusedError(111, "refused")

    def explain(url: str, exc: BaseException, timeout: float) -> str:
        return "timed out" if isinstance(exc, TimeoutError) else "refused"

    urls = ["amqp://u:s#cret@a/", "amqp://u:s#cret@slow/"]
    with pytest.raises(ConnectFailed) as info:
        await connect_first(urls, never, explain, per_url=0.2, budget=5)
    text = str(info.value)
    assert "cret" not in text
    assert text == (
        "cannot connect to any of 2 URLs: amqp://u:***@a/: refused; amqp://u:***@slow/: timed out"
    )
    with pytest.raises(ConnectFailed, match=NO_URL[:20]):
        await connect_first([], never, explain, per_url=1, budget=1)


class _LibError(Exception):
    pass


class _LibReturned(_LibError):
    pass


def test_error_table_maps_most_specific_first_chained_and_reraises_the_rest() -> None:
    rules = [
        (_LibReturned, lambda e: Undeliverable(f"returned: {e}")),
        (_LibError, lambda e: DriverError(f"library: {e}")),
    ]
    with pytest.raises(Undeliverable, match="returned: r") as info, map_errors(rules):
        raise _LibReturned("r")
    assert isinstance(info.value.__cause__, _LibReturned)
    with pytest.raises(DriverError, match="library: x"), map_errors(rules):
        raise _LibError("x")
    with pytest.raises(KeyError), map_errors(rules):
        raise KeyError("unmapped")
    with pytest.raises(ConnectionLost), map_errors([(Exception, lambda e: DriverError("no"))]):
        raise ConnectionLost("ours pass through")


def test_an_error_reported_from_a_callback_is_mapped_by_the_same_table() -> None:
    rules = [
        (_LibReturned, lambda e: Undeliverable(f"returned: {e}")),
        (_LibError, lambda e: DriverError(f"library: {e}")),
    ]
    told = mapped(_LibReturned("r"), rules)
    assert isinstance(told, Undeliverable) and str(told) == "returned: r"
    assert isinstance(mapped(_LibError("x"), rules), DriverError)
    ours = ConnectionLost("ours")
    assert mapped(ours, [(Exception, lambda e: DriverError("no"))]) is ours
    assert mapped(KeyError("unmapped"), rules) is None  # the caller says what it was
