"""Checks of a transport over time: an idle connection, and a connection dropped under it.

What a newcomer's own tests caught and the kit did not: a client library's default socket
timeout that cuts an idle blocking read (a false "connection lost", a message in doubt), and a
plugin that keeps sending on a connection the network has dropped (every send "succeeds" and
nothing arrives). Both checks run on the plugin's real server.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

from mqlab.errors import CallTimeout, TransportError
from mqlab.faults.link import LinkFaults
from mqlab.testing.kit import Kit, Pair, bodies
from mqlab.testing.subject import Subject
from mqlab.transport import Transport


def _listen(*transports: Transport) -> list[TransportError]:
    """Every error the transports report (``Transport.report``) from now on."""
    reports: list[TransportError] = []
    for t in transports:
        t.on_report = reports.append
    return reports


async def idle_then_send(subject: Subject) -> None:
    """After ``Subject.idle`` seconds with nothing sent (longer than the 5 s read timeout
    some client libraries default to), the next call, cast and notification work at once,
    and the transport reported nothing lost while it idled."""
    async with Kit(subject) as kit:
        pair = await kit.pair()
        await _round(kit, pair, "before")  # connections, queues and consumers are up
        reports = _listen(pair.server, pair.client)
        await asyncio.sleep(subject.idle)
        await _round(kit, pair, "after")
        assert not reports, (
            f"{subject.name} reported {len(reports)} error(s) while idle for {subject.idle:g} s "
            f"(a client's socket timeout cutting an idle read?): {reports[0]}"
        )


async def _round(kit: Kit, pair: Pair, what: str) -> None:
    """One call, cast and notification (those declared), each answered or delivered."""
    handled_before, heard_before = len(pair.handled), len(pair.heard)
    expected_handled = 0
    if "call" in kit.patterns:
        body = f"{what}-idle-call".encode()
        reply = await pair.client.call(kit.rpc(), body, kit.subject.arrival)
        assert reply == b"re:" + body, f"the call {what} idling got {reply!r}"
        expected_handled += 1
    if "cast" in kit.patterns:
        await pair.client.cast(kit.rpc(), f"{what}-idle-cast".encode())
        expected_handled += 1
    if "notify" in kit.patterns:
        await pair.client.notify(kit.events(), f"{what}-idle-notification".encode())
    await kit.settle(lambda: len(pair.handled) - handled_before, expected_handled)
    if "notify" in kit.patterns:
        await kit.settle(lambda: len(pair.heard) - heard_before, 1)
        assert len(pair.heard) - heard_before == 1, f"the notification {what} idling was lost"
    assert len(pair.handled) - handled_before == expected_handled, (
        f"{expected_handled} message(s) sent {what} idling, "
        f"{len(pair.handled) - handled_before} handled"
    )


async def dropped_connection(
    subject: Subject, options: Mapping[str, Any], at_most_once: bool = False
) -> None:
    """Every connection to the server is reset under the transport (an RST each way, through
    a TCP proxy). The transport must say so (``report()`` or an error from a send), within
    ``Subject.arrival`` seconds either deliver casts again or keep failing them (a cast that
    "succeeds" and never arrives means a dead connection reused), and, at most once,
    duplicate nothing. Then a client that had made no call before the drop calls: one of
    its calls gets its reply within ``arrival`` (its reply consumer, set up now, must not be
    set up on a connection the drop killed)."""
    if not subject.urls or not subject.drops:
        pytest.skip(f"{subject.name}: its messages do not cross Subject.urls (Subject.drops)")
    kit = Kit(subject)
    kit.require(pattern="cast")
    proxies = LinkFaults(_no_queue_node)
    try:
        proxied = await proxies.start(subject.urls)
        kit.urls = tuple(proxied[u] for u in subject.urls)
        async with kit:
            pair = await kit.pair(**options)
            caller = await kit.transport("caller", **options) if "call" in kit.patterns else None
            reports = _listen(pair.server, pair.client, *([caller] if caller else []))
            before = bodies("before-drop", 20)
            for body in before:
                await pair.client.cast(kit.rpc(), body)
            await kit.settle(lambda: len(pair.handled), len(before))
            for proxy in proxies.proxies.values():
                await proxy.command({"action": "reset"})
            sent, failed, last_failure_after = await _cast_through_the_drop(kit, pair)
            if last_failure_after is not None:  # it ended accepting: let those arrive
                await kit.settle(lambda: len(set(pair.handled.bodies) & set(sent)), 1)
            if caller is not None:
                await _a_call_is_answered(kit, caller)
    finally:
        await proxies.stop()
    counts = Counter(pair.handled.bodies)
    twice = sorted(b for b, n in counts.items() if n > 1)
    assert not (at_most_once and twice), (
        f"{len(twice)} cast(s) delivered twice after the drop: {twice[:3]}"
    )
    assert reports or failed, (
        f"{subject.name} said nothing when its connections were reset: no report(), "
        "no error from a send"
    )
    # what it accepted once it stopped failing: none of it arriving is a dead connection
    # reused (accepted casts among failing ones may be lost at most once: it said so)
    last = sent[sent.index(last_failure_after) :] if last_failure_after in sent else []
    if last and not any(counts[b] for b in last):
        raise AssertionError(
            f"{len(last)} cast(s) after the drop were accepted and none arrived within "
            f"{subject.arrival:g} s: the transport kept a dead connection"
        )


async def _a_call_is_answered(kit: Kit, caller: Transport) -> None:
    """Calls from ``caller`` (its first ones) for ``arrival`` s: one is answered, or they
    keep failing with what happened (as casts may: a transport that does not reconnect says
    so). Calls sent and never answered (CallTimeout) mean a dead reply consumer."""
    deadline = time.monotonic() + kit.subject.arrival
    failures: list[TransportError] = []
    while (left := deadline - time.monotonic()) > 0:
        body = b"call-after-drop-%d" % len(failures)
        try:
            reply = await caller.call(kit.rpc(), body, max(min(left, 3.0), 0.5))
        except TransportError as exc:
            failures.append(exc)
            await asyncio.sleep(0.05)
            continue
        assert reply == b"re:" + body, f"a call after the drop got {reply!r}"
        return
    if failures and isinstance(failures[-1], CallTimeout):
        raise AssertionError(
            f"a client that had made no call before the drop got no reply to its calls after "
            f"it within {kit.subject.arrival:g} s: sent and never answered (a reply consumer "
            f"set up on a connection the drop killed?): {failures[-1]}"
        )


async def _cast_through_the_drop(
    kit: Kit, pair: Pair
) -> tuple[list[bytes], list[str], bytes | None]:
    """Cast every 50 ms until one accepted cast arrives or ``arrival`` runs out: what was
    accepted, what failed, and the first cast accepted after the last failure."""
    sent: list[bytes] = []
    failed: list[str] = []
    after_last_failure: bytes | None = None
    deadline = time.monotonic() + kit.subject.arrival
    i = 0
    while time.monotonic() < deadline:
        body = b"after-drop-%d" % i
        i += 1
        try:
            await asyncio.wait_for(pair.client.cast(kit.rpc(), body), kit.subject.arrival)
        except TransportError as exc:
            failed.append(f"{type(exc).__name__}: {exc}")
            after_last_failure = None
        except TimeoutError:
            failed.append("a cast waited longer than Subject.arrival")
            after_last_failure = None
        else:
            sent.append(body)
            after_last_failure = after_last_failure or body
        if any(b in sent for b in pair.handled.bodies[-20:]):
            break
        await asyncio.sleep(0.05)
    return sent, failed, after_last_failure


async def _no_queue_node() -> str:
    return "node1"
