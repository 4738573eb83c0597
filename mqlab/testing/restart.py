"""Checks of a transport across its server's restart: under load, and after a crash.

What a newcomer's plugin let through and the kit did not: a library error no rule mapped,
raised out of a send while the server restarted (counted as ``Unmapped:<Type>``, and
unexplained); and ``mandatory`` answered wrongly once the server had been killed without
closing (``kill -9``) and restarted: a cast to nobody accepted and never handled, a call to
nobody waiting for its timeout. Both need ``Subject.restart``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

from mqlab.errors import CallTimeout, TransportError, Undeliverable
from mqlab.faults.verdict import promise
from mqlab.measure.account import NO_LOSS, ONCE
from mqlab.testing.kit import Kit, Pair
from mqlab.testing.subject import Subject
from mqlab.transport import CALL_TIMEOUT_SLACK, Target, Transport


def _restartable(subject: Subject) -> Kit:
    if subject.restart is None:
        pytest.skip(f"{subject.name}: no Subject.restart (how to restart its server)")
    return Kit(subject)


async def restart_under_load(subject: Subject, options: Mapping[str, Any]) -> None:
    """Casts every 10 ms while the server restarts. Every send that fails raises one of
    mqlab's errors (never a library's own); casts arrive again within ``arrival`` seconds;
    every loss is told (``report()`` or a failed send); and the driver keeps the promise its
    ``retry`` states, read as the verdict reads it (:func:`mqlab.faults.verdict.promise`):
    no loss (at least once), or no duplicate (at most once)."""
    kit = _restartable(subject)
    checked = subject.load().check({**subject.options, **options})
    kept = promise(checked, kit.features.at_most_once)
    kit.require(pattern="cast")
    assert subject.restart is not None
    async with kit:
        pair = await kit.pair(**options)
        reports: list[TransportError] = []
        for t in (pair.server, pair.client):
            t.on_report = reports.append
        load = _Load(kit, pair)
        sending = asyncio.create_task(load.run())
        try:
            await asyncio.sleep(0.5)
            await asyncio.to_thread(subject.restart, False)
            load.restarted = len(load.accepted)
            deadline = time.monotonic() + subject.arrival
            while not load.resumed() and time.monotonic() < deadline and not sending.done():
                await asyncio.sleep(0.05)
        finally:
            load.stop = True
            await sending  # an unmapped error it met is raised here
        await kit.settle(
            lambda: len(set(pair.handled.bodies) & set(load.accepted)), len(load.accepted)
        )
    assert load.resumed(), (
        f"no cast accepted after the server restarted arrived within {subject.arrival:g} s "
        f"({len(load.failed)} failed; the last: {load.failed[-1] if load.failed else 'none'})"
    )
    got = Counter(pair.handled.bodies)
    lost = [b for b in load.accepted if not got[b]]
    twice = sorted(b for b, n in got.items() if n > 1)
    assert not lost or reports or load.failed, (
        f"{len(lost)} accepted cast(s) lost across the restart and nothing told of it"
    )
    if kept is not None and kept.keeps == ONCE:
        assert not twice, f"{len(twice)} cast(s) delivered twice across the restart: {twice[:3]}"
    if kept is not None and kept.keeps == NO_LOSS:
        assert not lost, (
            f"{len(lost)} of {len(load.accepted)} accepted cast(s) lost across the server's "
            f"restart, though {kept.words} (first: {lost[:3]})"
        )


class _Load:
    """Casts every 10 ms until stopped: what was accepted, what failed and why."""

    def __init__(self, kit: Kit, pair: Pair) -> None:
        self.kit, self.pair = kit, pair
        self.accepted: list[bytes] = []
        self.failed: list[str] = []
        self.stop = False
        self.restarted = -1  # accepted before the restart returned

    def resumed(self) -> bool:
        after = set(self.accepted[self.restarted :]) if self.restarted >= 0 else set()
        return bool(after & set(self.pair.handled.bodies[-50:]))

    async def run(self) -> None:
        i = 0
        while not self.stop:
            body = b"restart-%d" % i
            i += 1
            try:
                await asyncio.wait_for(self.pair.client.cast(self.kit.rpc(), body), 10.0)
            except TransportError as exc:
                self.failed.append(f"{type(exc).__name__}: {exc}")
            except TimeoutError:
                self.failed.append("a cast waited 10 s")
            except Exception as exc:
                raise AssertionError(
                    f"a cast raised {type(exc).__name__} ({exc}) while the server restarted: "
                    "a library error no rule maps (mqlab counts it as Unmapped)"
                ) from exc
            else:
                self.accepted.append(body)
            await asyncio.sleep(0.01)


async def mandatory_after_a_kill(subject: Subject) -> None:
    """With ``Features.mandatory``: the server is killed without closing (SIGKILL) and
    restarted. Once a call to a live server is answered again, a call and a cast to a target
    nobody serves fail at once with Undeliverable, as before the crash."""
    kit = _restartable(subject)
    kit.require(pattern="call", feature="mandatory")
    assert subject.restart is not None
    async with kit:
        pair = await kit.pair(**subject.mandatory_options)
        lonely = Target(f"{kit.tag}-lonely", f"{kit.tag}-topic")
        await _undeliverable(pair.client, lonely, "before the kill")
        await asyncio.to_thread(subject.restart, True)
        await _answered_again(kit, pair.client)
        await _undeliverable(pair.client, lonely, "after the kill and restart")


async def _answered_again(kit: Kit, client: Transport) -> None:
    deadline = time.monotonic() + kit.subject.arrival
    last = "none"
    while (left := deadline - time.monotonic()) > 0:
        try:
            await client.call(kit.rpc(server="s1"), b"again", max(min(left, 3.0), 0.5))
            return
        except TransportError as exc:
            last = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(0.1)
    raise AssertionError(
        f"no call answered within {kit.subject.arrival:g} s of the restart: {last}"
    )


async def _undeliverable(client: Transport, lonely: Target, when: str) -> None:
    timeout = 5.0
    started = time.monotonic()
    try:
        await client.call(lonely, b"to-nobody", timeout)
    except Undeliverable:
        pass
    except CallTimeout as exc:
        raise AssertionError(
            f"a call nobody serves {when} waited {time.monotonic() - started:.1f} s for its "
            "timeout instead of failing with Undeliverable (mandatory)"
        ) from exc
    else:
        raise AssertionError(f"a call nobody serves {when} got a reply")
    took = time.monotonic() - started
    assert took < timeout - CALL_TIMEOUT_SLACK, f"Undeliverable {when} took {took:.1f} s"
    try:
        await asyncio.wait_for(client.cast(lonely, b"cast-to-nobody"), timeout)
    except Undeliverable:
        return
    except TimeoutError as exc:
        raise AssertionError(f"a cast nobody serves {when} waited {timeout:g} s") from exc
    raise AssertionError(
        f"a cast nobody serves {when} was accepted (mandatory: it must fail with Undeliverable)"
    )
