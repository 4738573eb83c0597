"""Checks of a transport's life: refused options, a failed connect, a clean close."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import pytest

from mqlab.errors import CallTimeout, ConnectFailed, OptionError, Undeliverable
from mqlab.testing.kit import Kit, Recorder, assert_once, bodies
from mqlab.testing.subject import SECRET, Subject, build
from mqlab.transport import CLOSE_LIMIT, START_LIMIT, Target, Transport

#: How long a server may take to drop what a closed transport declared.
CLEANUP_LIMIT = 20.0


def bad_values(cls: type[Transport]) -> Iterator[tuple[str, Any]]:
    """One ill-typed or out-of-choice value per declared option, where one is evident."""
    for name, option in cls.option_specs.items():
        if str not in option.types:
            yield name, "kit-not-a-valid-value"
        elif option.choices:
            yield name, "kit-not-one-of-the-choices"


async def refused_options(subject: Subject) -> None:
    """An unknown option and bad values are refused with OptionError naming the option, and
    each of ``Subject.bad_combinations`` as a whole, naming one of its options."""
    cls = subject.load().cls
    cases = [("kit_no_such_option", 1), *bad_values(cls), *subject.bad_options.items()]
    for name, value in cases:
        await _refused(subject, {name: value})
    for combination in subject.bad_combinations:
        await _refused(subject, combination)


async def _refused(subject: Subject, options: Mapping[str, Any]) -> None:
    shown = ", ".join(f"{k}={v!r}" for k, v in options.items())
    what = f"the option {shown}" if len(options) == 1 else f"the options {shown} together"
    transport: Transport | None = None
    try:
        # refused when built (schema and combinations); start() only for a bad driver
        transport = build(subject, "kit-options", options)
        await transport.start()
    except OptionError as exc:
        assert exc.option in options, f"{what} refused, but naming {exc.option!r}"
    except Exception as exc:
        raise AssertionError(
            f"{what} raised {type(exc).__name__} ({exc}), not OptionError"
        ) from exc
    else:
        raise AssertionError(f"{subject.name} accepted {what}")
    finally:
        if transport is not None:
            await transport.aclose()


async def connect_failure(subject: Subject) -> None:
    """start() against nobody raises ConnectFailed in one line, without the password."""
    urls = subject.unreachable()
    if urls is None and not subject.unreachable_options:
        pytest.skip(f"{subject.name} has no server to fail to reach (set Subject.unreachable_*)")
    transport = build(subject, "kit-unreachable", subject.unreachable_options, urls)
    started = time.monotonic()
    try:
        with pytest.raises(ConnectFailed) as failed:
            await transport.start()
    finally:
        await transport.aclose()
    took = time.monotonic() - started
    message = str(failed.value)
    assert SECRET not in message, f"ConnectFailed shows the password: {message}"
    assert "\n" not in message, f"ConnectFailed is not one line: {message!r}"
    assert took < START_LIMIT, f"start() took {took:.1f}s to fail"


def _new_tasks(before: set[asyncio.Task[Any]]) -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t not in before and not t.done()]


async def clean_close(subject: Subject) -> None:
    """aclose() after use leaves no asyncio task and nothing on the server; twice is harmless."""
    before = asyncio.all_tasks()
    async with Kit(subject) as kit:
        patterns = kit.patterns
        server, client, _, _ = await kit.pair()
        if "notify" in patterns:
            await client.notify(kit.events(), b"note")
        if "call" in patterns:
            await client.call(kit.rpc(), b"call", 10.0)
            # an exchange nobody serves: whatever the client declared for it must go too
            lonely = Target(f"{kit.tag}-lonely", f"{kit.tag}-topic")
            with contextlib.suppress(CallTimeout, Undeliverable):
                await client.call(lonely, b"call", 0.3)
        if "cast" in patterns:
            await client.cast(kit.rpc(), b"cast")
            if kit.features.fanout:
                await client.cast(kit.rpc(fanout=True), b"fanout")
        for transport in (client, server, client):  # the second close must be harmless
            started = time.monotonic()
            await transport.aclose()
            took = time.monotonic() - started
            assert took < CLOSE_LIMIT, f"aclose() took {took:.1f}s"

    deadline = time.monotonic() + 2.0
    while _new_tasks(before) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    left = _new_tasks(before)
    assert not left, f"{len(left)} task(s) left after aclose(): " + ", ".join(
        f"{t.get_name()} {t.get_coro()!r}" for t in left[:5]
    )

    await nothing_left(subject, kit.tag, "after aclose()")


async def nothing_left(subject: Subject, tag: str, after: str) -> None:
    """What ``subject.leftovers`` finds under ``tag`` goes within CLEANUP_LIMIT seconds;
    else AssertionError naming it, "left on the server <after>: [...]"."""
    if subject.leftovers is None:
        return
    deadline = time.monotonic() + CLEANUP_LIMIT
    while objects := await asyncio.to_thread(subject.leftovers, tag):
        if time.monotonic() > deadline:
            raise AssertionError(f"left on the server {after}: {sorted(objects)}")
        await asyncio.sleep(0.2)


async def durable_close(subject: Subject) -> None:
    """With ``Features.durable``: a listener of a durable pool closes cleanly, notifications
    go on, and the pool's next listener gets every one of them (a clean close must not
    delete what is still queued for a consumer that will come back)."""
    kit = Kit(subject)
    kit.require(pattern="notify", feature="durable")
    events = replace(kit.events(), durable=True)
    pool = kit.pool("durable")
    try:
        async with kit:
            client = await kit.transport("client")
            first, second = Recorder(), Recorder()
            listener = await kit.transport("listener1")
            await listener.serve_notifications(events, pool, first)
            before = bodies("while-listening", 5)
            for body in before:
                await client.notify(events, body)
            await kit.settle(lambda: len(first), len(before))
            assert_once("notifications to the first listener", first.bodies, before)
            await listener.aclose()
            queued = bodies("while-nobody-listens", 10)
            for body in queued:
                await client.notify(events, body)
            again = await kit.transport("listener2")
            await again.serve_notifications(events, pool, second)
            await kit.settle(lambda: len(second), len(queued))
            assert_once(
                "durable notifications queued while the pool's listener was closed, "
                "for its next listener",
                second.bodies,
                queued,
            )
    finally:
        if subject.drop is not None:
            await asyncio.to_thread(subject.drop, kit.tag)  # durable: it outlives a close
