"""Checks that messages go where the contract says, once each.

Each check is an ``async def check(subject)`` that raises AssertionError when
the transport breaks the contract and skips (naming the declaration) when the
transport does not declare what it needs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Mapping
from typing import Any

import pytest

from mqlab.errors import CallTimeout, Undeliverable
from mqlab.testing.kit import Kit, Recorder, assert_once, bodies, core_caster
from mqlab.testing.subject import Subject

#: A call's timeout where none should be needed.
REPLY_WITHIN = 10.0


async def two_servers(kit: Kit) -> tuple[Recorder, Recorder]:
    """Servers s1 and s2 of the check's topic, each in its own transport."""
    one, two = Recorder(), Recorder()
    await (await kit.transport("server1")).serve_rpc(kit.rpc(server="s1"), one)
    await (await kit.transport("server2")).serve_rpc(kit.rpc(server="s2"), two)
    return one, two


async def call(subject: Subject) -> None:
    """A call returns its own reply; the server's handler saw each request once."""
    async with Kit(subject) as kit:
        kit.require(pattern="call")
        _, client, handled, _ = await kit.pair()
        sent = bodies("call", 10)
        replies = [await client.call(kit.rpc(), body, REPLY_WITHIN) for body in sent]
        assert replies == [b"re:" + body for body in sent], "a call returned another's reply"
        await kit.settle(lambda: len(handled), len(sent))
        assert_once("calls at the server", handled.bodies, sent)


async def cast(subject: Subject) -> None:
    """Every cast reaches the topic's server once."""
    async with Kit(subject) as kit:
        kit.require(pattern="cast")
        _, client, handled, _ = await kit.pair()
        sent = bodies("cast", 20)
        for body in sent:
            await client.cast(kit.rpc(), body)
        await kit.settle(lambda: len(handled), len(sent))
        assert_once("casts", handled.bodies, sent)


async def casts_as_the_core_sends_them(subject: Subject) -> None:
    """Casts sent as mqlab's senders send them (``begin_cast``, awaiting only what it
    returns, 10 senders back to back) each reach the server once."""
    async with Kit(subject) as kit:
        kit.require(pattern="cast")
        _, client, handled, _ = await kit.pair()
        cast, target = core_caster(client), kit.rpc()

        async def sender(mine: list[bytes]) -> None:
            for body in mine:
                await cast(target, body)

        sent = bodies("cast", 1000)
        await asyncio.gather(*(sender(sent[i::10]) for i in range(10)))
        await kit.settle(lambda: len(handled), len(sent))
        assert_once("casts sent through begin_cast", handled.bodies, sent)


async def notify(subject: Subject) -> None:
    """Every notification reaches the one listener of a pool once."""
    async with Kit(subject) as kit:
        kit.require(pattern="notify")
        _, client, _, heard = await kit.pair()
        sent = bodies("note", 20)
        for body in sent:
            await client.notify(kit.events(), body)
        await kit.settle(lambda: len(heard), len(sent))
        assert_once("notifications", heard.bodies, sent)


async def servers_share_casts(subject: Subject) -> None:
    """Two servers of one topic share its casts: each cast handled once, by one of them."""
    async with Kit(subject) as kit:
        kit.require(pattern="cast")
        one, two = await two_servers(kit)
        client = await kit.transport("client")
        sent = bodies("cast", 40)
        await asyncio.gather(*(client.cast(kit.rpc(), body) for body in sent))
        await kit.settle(lambda: len(one) + len(two), len(sent))
        assert_once("casts across the topic's servers", one.bodies + two.bodies, sent)
        assert one.bodies and two.bodies, (
            f"the servers do not share the topic: {len(one)} and {len(two)} casts"
        )


async def every_pool_gets_every_notification(subject: Subject) -> None:
    """Listeners of one pool share its notifications; every pool gets all of them."""
    async with Kit(subject) as kit:
        kit.require(pattern="notify")
        shared_a, shared_b, alone = Recorder(), Recorder(), Recorder()
        for role, pool, handler in [
            ("listener1", "shared", shared_a),
            ("listener2", "shared", shared_b),
            ("listener3", "alone", alone),
        ]:
            listener = await kit.transport(role)
            await listener.serve_notifications(kit.events(), kit.pool(pool), handler)
        client = await kit.transport("client")
        sent = bodies("note", 40)
        await asyncio.gather(*(client.notify(kit.events(), body) for body in sent))
        await kit.settle(lambda: len(shared_a) + len(shared_b) + len(alone), 2 * len(sent))
        assert_once("notifications to the pool of one", alone.bodies, sent)
        assert_once("notifications to the pool of two", shared_a.bodies + shared_b.bodies, sent)
        assert shared_a.bodies and shared_b.bodies, (
            f"the listeners of one pool do not share: {len(shared_a)} and {len(shared_b)}"
        )


async def fanout_reaches_every_server(subject: Subject) -> None:
    """A fanout cast reaches every server of the topic once."""
    async with Kit(subject) as kit:
        kit.require(pattern="cast", feature="fanout")
        one, two = await two_servers(kit)
        client = await kit.transport("client")
        sent = bodies("fanout", 10)
        for body in sent:
            await client.cast(kit.rpc(fanout=True), body)
        await kit.settle(lambda: len(one) + len(two), 2 * len(sent))
        assert_once("fanout casts at server s1", one.bodies, sent)
        assert_once("fanout casts at server s2", two.bodies, sent)


async def each_cast_goes_where_its_target_says(subject: Subject) -> None:
    """One client casting in turn to server s2, to every server (fanout) and to the topic:
    each cast goes where its own target says, whatever the client sent before (a plugin
    that works a destination out once must do it per target, not per topic)."""
    async with Kit(subject) as kit:
        kit.require(pattern="cast")
        one, two = await two_servers(kit)
        client = await kit.transport("client")
        to_s2, to_any = bodies("to-s2", 5), bodies("to-any", 5)
        to_all = bodies("to-all", 5) if kit.features.fanout else []
        for i in range(5):
            await client.cast(kit.rpc(server="s2"), to_s2[i])
            if to_all:
                await client.cast(kit.rpc(fanout=True), to_all[i])
            await client.cast(kit.rpc(), to_any[i])
        await kit.settle(lambda: len(one) + len(two), len(to_s2) + 2 * len(to_all) + len(to_any))
        mine = set(to_s2) | set(to_all)
        assert_once("casts to server s2 and to every server, at s2",
                    [b for b in two.bodies if b in mine], to_s2 + to_all)  # fmt: skip
        assert_once("casts to every server, at s1", [b for b in one.bodies if b in mine], to_all)
        any_ = [b for b in one.bodies + two.bodies if b not in mine]
        assert_once("casts to the topic, across its servers", any_, to_any)


async def targeted_call_reaches_the_named_server(subject: Subject) -> None:
    """A call (and a cast) naming a server reaches that server and no other."""
    async with Kit(subject) as kit:
        kit.require(pattern="call")
        one, two = await two_servers(kit)
        client = await kit.transport("client")
        sent = bodies("to-s2", 10)
        for body in sent:
            assert await client.call(kit.rpc(server="s2"), body, REPLY_WITHIN) == b"re:" + body
        casts = bodies("cast-to-s2", 10) if "cast" in kit.patterns else []
        for body in casts:
            await client.cast(kit.rpc(server="s2"), body)
        await kit.settle(lambda: len(two), len(sent) + len(casts))
        assert_once("messages to server s2", two.bodies, sent + casts)
        assert one.bodies == [], f"server s1 got {len(one)} messages meant for s2"


async def call_to_nobody(subject: Subject) -> None:
    """A call to a topic nobody serves: Undeliverable at once if mandatory, else CallTimeout.

    A server serves another topic of the same exchange, so the exchange exists
    (on a broker) and only the topic has no listener. A mandatory transport also
    refuses a cast to a server nobody is.
    """
    async with Kit(subject) as kit:
        kit.require(pattern="call")
        server = await kit.transport("server")
        await server.serve_rpc(kit.rpc(server="s1"), Recorder())
        if kit.features.mandatory:
            client = await kit.transport("client", **subject.mandatory_options)
            timeout = REPLY_WITHIN
            started = time.monotonic()
            with pytest.raises(Undeliverable):
                await client.call(kit.rpc("unserved"), b"to-nobody", timeout)
            took = time.monotonic() - started
            assert took < timeout / 2, f"Undeliverable came after {took:.1f}s, not at once"
            if "cast" in kit.patterns:
                with pytest.raises(Undeliverable):
                    await client.cast(kit.rpc(server="nobody"), b"to-nobody")
            return
        client = await kit.transport("client")
        timeout = 1.0
        started = time.monotonic()
        with pytest.raises(CallTimeout):
            await client.call(kit.rpc("unserved"), b"to-nobody", timeout)
        took = time.monotonic() - started
        assert timeout * 0.9 <= took < timeout + 1.0, (
            f"CallTimeout after {took:.2f}s for a {timeout:g}s timeout"
        )


async def large_messages(subject: Subject) -> None:
    """1 MiB bodies arrive intact in every declared pattern."""
    async with Kit(subject) as kit:
        patterns = kit.patterns
        _, client, handled, heard = await kit.pair()
        big = os.urandom(1024 * 1024)
        expected_rpc: list[bytes] = []
        if "call" in patterns:
            reply = await client.call(kit.rpc(), b"c" + big, REPLY_WITHIN)
            assert reply == b"re:c" + big, f"a 1 MiB call came back as {len(reply)} other bytes"
            expected_rpc.append(b"c" + big)
        if "cast" in patterns:
            await client.cast(kit.rpc(), b"k" + big)
            expected_rpc.append(b"k" + big)
        if "notify" in patterns:
            await client.notify(kit.events(), b"n" + big)
        await kit.settle(
            lambda: len(handled) + len(heard), len(expected_rpc) + ("notify" in patterns)
        )
        assert handled.bodies == expected_rpc, "a 1 MiB call or cast arrived altered or not once"
        if "notify" in patterns:
            assert heard.bodies == [b"n" + big], "a 1 MiB notification arrived altered or not once"


async def concurrent_senders(subject: Subject, options: Mapping[str, Any]) -> None:
    """100 concurrent senders per pattern: every reply to its caller, nothing lost or doubled."""
    n = 100
    async with Kit(subject) as kit:
        patterns = kit.patterns
        _, client, handled, heard = await kit.pair(**options)
        sent: list[bytes] = []
        if "call" in patterns:
            calls = bodies("call", n)
            replies = await asyncio.gather(
                *(client.call(kit.rpc(), body, REPLY_WITHIN) for body in calls)
            )
            assert list(replies) == [b"re:" + body for body in calls], "a caller got another reply"
            sent += calls
        if "cast" in patterns:
            casts = bodies("cast", n)
            await asyncio.gather(*(client.cast(kit.rpc(), body) for body in casts))
            sent += casts
        notes = bodies("note", n) if "notify" in patterns else []
        await asyncio.gather(*(client.notify(kit.events(), body) for body in notes))
        await kit.settle(lambda: len(handled) + len(heard), len(sent) + len(notes))
        assert_once("concurrent calls and casts at the server", handled.bodies, sent)
        assert_once("concurrent notifications", heard.bodies, notes)


async def quorum_queues(subject: Subject) -> None:
    """With Features.queue_types: calls and notifications work on quorum queues, and the
    queues the server consumes are quorum queues on the server (``Subject.queue_types``)."""
    if subject.queue_types is None:
        pytest.skip(f"{subject.name}: the Subject has no queue_types hook to read the server")
    tag = ""
    try:
        async with Kit(subject) as kit:
            kit.require(feature="queue_types")
            tag = kit.tag
            server = await kit.transport("server")
            client = await kit.transport("client")
            handled, heard = Recorder(), Recorder()
            rpc = kit.rpc(queue_type="quorum")
            events = dataclasses.replace(kit.events(), queue_type="quorum")
            served = 0
            if "call" in kit.patterns:
                await server.serve_rpc(kit.rpc(server="s1", queue_type="quorum"), handled)
                sent = bodies("quorum-call", 5)
                replies = [await client.call(rpc, body, REPLY_WITHIN) for body in sent]
                assert replies == [b"re:" + body for body in sent], "a call on quorum queues"
                served += 1
            if "notify" in kit.patterns:
                await server.serve_notifications(events, kit.pool("pool"), heard)
                sent = bodies("quorum-notify", 5)
                for body in sent:
                    await client.notify(events, body)
                await kit.settle(lambda: len(heard), len(sent))
                assert_once("notifications on a quorum queue", heard.bodies, sent)
                served += 1
            types = await asyncio.to_thread(subject.queue_types, kit.tag)
            quorum = sorted(name for name, kind in types.items() if kind == "quorum")
            assert len(quorum) >= served, (
                f"asked for quorum queues, the server holds {dict(sorted(types.items()))}"
            )
    finally:
        if subject.drop is not None and tag:
            await asyncio.to_thread(subject.drop, tag)
