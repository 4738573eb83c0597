"""The kafka plugin on the session's private Kafka broker (KRaft, never skipped): the
conformance kit, and its delivery promises per option.

A handler that raises stands for a server that dies holding a batch it fetched:
its reader stops before it commits, as a killed process would.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from mqlab_kafka.transport import bootstrap

from mqlab import registry
from mqlab.servers.handle import ServerHandle
from mqlab.testing import ConformanceSuite, Subject
from mqlab.transport import Target, Transport


def kafka_leftovers(url: str) -> Callable[[str], list[str]]:
    """Topics and consumer groups naming the tag: what servers, pools and clients left."""

    async def listed(tag: str) -> list[str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=[bootstrap(url)])
        await admin.start()
        try:
            found = [f"topic {t}" for t in await admin.list_topics() if tag in t]
            groups = [str(g[0]) for g in await admin.list_consumer_groups()]
            return found + [f"group {g}" for g in groups if tag in g]
        finally:
            await admin.close()

    def leftovers(tag: str) -> list[str]:
        return asyncio.run(listed(tag))  # the kit calls it in a thread of its own

    return leftovers


def on_kafka(server: ServerHandle, **fields: Any) -> Subject:
    """The kafka plugin on ``server`` as the kit checks it (``fields``: more Subject fields)."""
    return Subject(
        "kafka",
        urls=server.urls,
        at_most_once_options={"acks": 0, "commit": "before"},
        bad_options={"partitions": 0, "batch": 0, "linger_ms": -1, "acks": 2},
        leftovers=kafka_leftovers(server.urls[0]),
        # the URL is only where clients bootstrap: they then connect to the listener the
        # broker advertises, so dropping connections to the URL never touches a message
        drops=False,
        **fields,
    )


class TestKafkaConformance(ConformanceSuite):
    @pytest.fixture
    def subject(self, kafka_server: ServerHandle) -> Subject:
        return on_kafka(kafka_server)


def _transport(server: ServerHandle, worker: str, **options: object) -> Transport:
    return registry.get("kafka").build(server.urls, options, worker)


def _crash(body: bytes) -> bytes:
    raise RuntimeError("the server died while handling")


async def _wait_for(got: Callable[[], int], want: int, within: float) -> None:
    deadline = time.monotonic() + within
    while got() < want and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)  # anything beyond want would be a duplicate


async def _casts_survive_a_crash(
    server: ServerHandle, within: float, **options: object
) -> list[bytes]:
    """Casts sent, then fetched in one batch by a server that dies on the first; what the
    same server, restarted, handles. One partition: the batch is every cast sent."""
    options = {"partitions": 1, **options}
    target = Target(f"crash-{uuid.uuid4().hex[:8]}", "topic")
    sent = [b"c%d" % i for i in range(10)]
    got: list[bytes] = []
    async with _transport(server, "client", **options) as client:
        for body in sent:  # kept for the topic's first group
            await client.cast(target, body)
        async with _transport(server, "w1", **options) as dying:
            await dying.serve_rpc(target.to_server("s1"), _crash)
            await asyncio.sleep(1.0)  # fetched, and the reader died on the first
        async with _transport(server, "w1", **options) as restarted:
            await restarted.serve_rpc(target.to_server("s1"), got.append)
            await _wait_for(lambda: len(got), len(sent), within)
    return got


def test_commit_after_a_restarted_server_handles_what_it_fetched_and_never_committed(
    kafka_server: ServerHandle,
) -> None:
    got = asyncio.run(_casts_survive_a_crash(kafka_server, 10.0))
    assert sorted(got) == sorted(b"c%d" % i for i in range(10))


def test_commit_before_loses_what_a_dead_server_fetched(kafka_server: ServerHandle) -> None:
    # what was fetched is committed: nothing comes, within the time the other test needed
    got = asyncio.run(_casts_survive_a_crash(kafka_server, 3.0, commit="before"))
    assert got == []


def test_notifications_sent_before_any_listener_wait_for_the_first_pool(
    kafka_server: ServerHandle,
) -> None:
    """Kafka keeps a topic's records for a group that comes later, as a queue would."""

    async def check() -> list[bytes]:
        target = Target(f"early-{uuid.uuid4().hex[:8]}", "events")
        heard: list[bytes] = []
        async with _transport(kafka_server, "client") as client:
            for i in range(5):
                await client.notify(target, b"n%d" % i)
            async with _transport(kafka_server, "listener") as listener:
                await listener.serve_notifications(target, "pool", lambda b: heard.append(b))
                await _wait_for(lambda: len(heard), 5, 10.0)
        return heard

    assert sorted(asyncio.run(check())) == [b"n%d" % i for i in range(5)]


async def _a_commit_refused(server: ServerHandle, commit: str) -> tuple[list[str], list[bytes]]:
    """The broker refuses one commit of a server's reader (as while it restarts or its group
    rebalances): what the server reported, and what it handled after."""
    from aiokafka.errors import KafkaConnectionError

    target = Target(f"commit-{uuid.uuid4().hex[:8]}", "topic")
    got: list[bytes] = []
    told: list[str] = []
    kafka = registry.get("kafka")
    options = {"partitions": 1, "commit": commit, **({"acks": 0} if commit == "before" else {})}
    async with kafka.build(server.urls, options, "server") as srv:
        srv.on_report = lambda error: told.append(str(error))
        await srv.serve_rpc(target, got.append)
        async with kafka.build(server.urls, options, "client") as client:
            await client.cast(target, b"warm")
            deadline = time.monotonic() + 20
            while b"warm" not in got and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            for reader in srv._readers:  # type: ignore[attr-defined]
                commit_now = reader.consumer.commit

                async def refused_once(reader: Any = reader, commit_now: Any = commit_now) -> None:
                    reader.consumer.commit = commit_now
                    raise KafkaConnectionError("the coordinator went away")

                reader.consumer.commit = refused_once
            await client.cast(target, b"refused")
            await asyncio.sleep(1.0)
            await client.cast(target, b"after")
            while b"after" not in got and time.monotonic() < deadline + 20:
                await asyncio.sleep(0.05)
    return told, got


@pytest.mark.parametrize("commit", ["before", "after"])
def test_a_commit_the_broker_refuses_is_told_and_the_reader_goes_on(
    kafka_server: ServerHandle, commit: str
) -> None:
    # a commit fails while the broker restarts: the reader stopped for good, and its group
    # read nothing more (the kit's restart check at most once, once under load)
    told, got = asyncio.run(_a_commit_refused(kafka_server, commit))
    assert b"after" in got, f"nothing cast after a refused commit was handled ({told[:3]})"
    assert any(f"the commit {commit} handling" in t for t in told), told
    # at most once a batch whose commit was refused is not handled: never twice
    assert (b"refused" in got) is (commit == "after")
