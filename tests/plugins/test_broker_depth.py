"""What Redis Streams, Kafka, Artemis and NATS JetStream still hold of a step, read fresh
from each (issue 41): a server that dies holding what it read leaves it in its broker, and
the reader counts exactly what is there (real private servers and real plugins; never
skipped)."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from mqlab import registry
from mqlab.codec import Codec
from mqlab.measure.account import Depth
from mqlab.servers.depth import ArtemisDepth, KafkaDepth, NatsDepth, RedisDepth
from mqlab.servers.handle import ServerHandle
from mqlab.transport import Target, Transport


def _crash(body: bytes) -> bytes:
    raise RuntimeError("the server died while handling")


def _total(found: tuple[Depth, ...]) -> int | None:
    if any(d.messages is None for d in found):
        return None
    return sum(d.messages or 0 for d in found)


async def _until(value: Callable[[], object], want: object, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while value() != want and time.monotonic() < deadline:
        await asyncio.sleep(0.1)


def _step() -> tuple[str, Target, Target]:
    """A step's marker, one of its targets, and another step's target on the same exchange."""
    marker = f"m{uuid.uuid4().hex[:8]}_run_3"
    return marker, Target("x", f"t_{marker}"), Target("x", f"t_other{uuid.uuid4().hex[:6]}")


def test_redis_holds_each_groups_lag_and_pending_entries(redis_server: ServerHandle) -> None:
    def build(worker: str) -> Transport:
        return registry.get("redis-streams").build(redis_server.urls, {}, worker)

    async def check() -> None:
        marker, target, other = _step()
        reader = RedisDepth(redis_server.urls[0])
        try:
            assert await reader.depth(marker) == ()  # nothing of the step yet
            async with build("s0") as dying, build("s9") as elsewhere, build("c1") as client:
                await dying.serve_rpc(target, _crash)  # reads a batch, dies before XACK
                await elsewhere.serve_rpc(other, _crash)
                for i in range(10):
                    await client.cast(target, b"%d" % i)
                    await client.cast(other, b"%d" % i)
                await asyncio.sleep(1.0)  # read (pending), never acked
                for i in range(5):  # the group's reader is dead: these wait in the stream
                    await client.cast(target, b"late%d" % i)
                found = await reader.depth(marker)
                assert _total(found) == 15, found  # 10 pending + 5 lag, the other step's not
                # the shared stream's group holds them; the server's own stream nothing
                held = {d.queue: d.messages for d in found if d.messages}
                assert held == {f"mqlab:rpc:x:t_{marker} group servers": 15}
                assert all(d.age_ns == 0 for d in found)
        finally:
            await reader.aclose()

    asyncio.run(check())


def test_redis_unreachable_or_unable_to_tell_is_an_unknown_depth_with_why(
    redis_server: ServerHandle,
) -> None:
    async def check() -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        gone = RedisDepth(f"redis://127.0.0.1:{port}/0")
        (d,) = await gone.depth("m")
        await gone.aclose()
        assert d.messages is None and "Redis" in d.why
        # an entry deleted from the middle of the stream: Redis no longer knows the lag
        import redis.asyncio as aioredis

        marker = f"m{uuid.uuid4().hex[:8]}"
        key = f"mqlab:rpc:x:t_{marker}"
        conn = aioredis.from_url(redis_server.urls[0])
        await conn.xgroup_create(key, "servers", id="$", mkstream=True)
        ids = [await conn.xadd(key, {b"b": b"x"}) for _ in range(3)]
        await conn.xdel(key, ids[1])
        reader = RedisDepth(redis_server.urls[0])
        (d,) = await reader.depth(marker)
        await reader.aclose()
        await conn.delete(key)
        await conn.aclose()
        assert d.messages is None and "lag" in d.why

    asyncio.run(check())


def test_redis_names_the_entry_a_dead_server_read_and_never_acked_by_its_number(
    redis_server: ServerHandle,
) -> None:
    # issue 43: the account must call still queued the message Redis holds, not the last
    # one missing; the bodies are written by a codec setting the reader is not told
    import redis.asyncio as aioredis

    body = Codec("json", envelope=True).encoder(1)

    async def check() -> None:
        marker, target, _ = _step()
        key = f"mqlab:rpc:x:t_{marker}"
        conn = aioredis.from_url(redis_server.urls[0])
        reader = RedisDepth(redis_server.urls[0])
        transport = registry.get("redis-streams").build

        async def shared() -> list[Depth]:  # the servers' stream; its own holds none
            return [d for d in await reader.depth(marker) if d.queue == f"{key} group servers"]

        try:
            async with (
                transport(redis_server.urls, {}, "s0") as dying,
                transport(redis_server.urls, {}, "c1") as client,
            ):
                await dying.serve_rpc(target, _crash)  # reads 201, dies before XACK
                await client.cast(target, body(201, 0, 100))
                await _until_pending(conn, key, 1)
                for n in (202, 203):  # nobody reads these: they wait in the stream
                    await client.cast(target, body(n, 0, 100))
                await client.cast(target, b"not an mqlab body")
                (d,) = await shared()
                assert d.messages == 4, d  # counted, whether it names them or not
                assert d.named == {(1, 201), (1, 202), (1, 203)}, d
                # 201 trimmed from the stream while pending: Redis still lists it
                # pending, but it holds nothing
                second = (await conn.xrange(key, count=2))[1][0]
                await conn.xtrim(key, minid=second, approximate=False)
                (d,) = await shared()
                assert (d.messages, d.named) == (3, {(1, 202), (1, 203)}), d
        finally:
            await reader.aclose()
            await conn.delete(key)
            await conn.aclose()

    asyncio.run(check())


async def _until_pending(conn: Any, key: str, want: int) -> None:
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        groups = await conn.xinfo_groups(key) if await conn.exists(key) else []
        if sum(g["pending"] for g in groups) >= want:
            return
        await asyncio.sleep(0.1)


def test_kafka_holds_what_each_group_has_not_committed(kafka_server: ServerHandle) -> None:
    def build(worker: str) -> Transport:
        return registry.get("kafka").build(kafka_server.urls, {"partitions": 2}, worker)

    async def check() -> None:
        marker, target, _ = _step()
        reader = KafkaDepth(kafka_server.urls)
        got: list[bytes] = []
        try:
            async with build("s0") as server, build("s1") as dying, build("c1") as client:
                await server.serve_rpc(target, got.append)
                for i in range(20):
                    await client.cast(target, b"%d" % i)
                await _until(lambda: len(got), 20)
                await asyncio.sleep(1.0)  # the last batch committed
                assert _total(await reader.depth(marker)) == 0
                # a server of the step's second topic dies on its first batch, uncommitted
                second = Target("x", f"t_{marker}_b")
                await dying.serve_rpc(second, _crash)
                for i in range(7):
                    await client.cast(second, b"late%d" % i)
                await asyncio.sleep(1.0)
                found = await reader.depth(marker)
                assert _total(found) == 7, found
                held = [d.queue for d in found if d.messages]
                assert held == [
                    "group mqlab.rpc.x.t_5f_" + marker.replace("_", "_5f_") + "_5f_b~servers"
                ]
        finally:
            await reader.aclose()

    asyncio.run(check())


def test_artemis_holds_each_queues_message_count(artemis_server: ServerHandle) -> None:
    def build(worker: str) -> Transport:
        return registry.get("amqp1").build(artemis_server.urls, {"broker": "artemis"}, worker)

    async def check() -> None:
        marker, target, other = _step()
        reader = ArtemisDepth(artemis_server.urls[0])
        async with build("c1") as client:
            for i in range(7):  # nobody serves yet: the anycast queue keeps them
                await client.cast(target, b"%d" % i)
                await client.cast(other, b"%d" % i)
        found = await reader.depth(marker)
        assert _total(found) == 7, found
        got: list[bytes] = []
        async with build("s0") as server:
            await server.serve_rpc(target, got.append)
            await _until(lambda: len(got), 7)
            await asyncio.sleep(0.5)
            assert _total(await reader.depth(marker)) == 0
        async with build("s9") as drain:  # the other step's, so the broker is left clean
            await drain.serve_rpc(other, lambda body: None)
            await asyncio.sleep(1.0)

    asyncio.run(check())


def test_nats_jetstream_holds_each_durable_consumers_pending_and_unacked(
    nats_server: ServerHandle,
) -> None:
    def build(worker: str) -> Transport:
        return registry.get("nats").build(nats_server.urls, {}, worker)

    async def check() -> None:
        marker, _, _ = _step()
        target = Target(f"x{marker}", f"t_{marker}", durable=True)
        other = Target(f"x{marker}", f"t_other{uuid.uuid4().hex[:6]}", durable=True)
        reader = NatsDepth(nats_server.urls[0])
        got: list[bytes] = []
        async with build("p0") as fine, build("p1") as dying, build("c1") as client:
            await fine.serve_notifications(target, f"t_{marker}_pool0", got.append)
            await dying.serve_notifications(target, f"t_{marker}_pool1", _crash)
            await fine.serve_notifications(other, "elsewhere_pool0", _crash)
            for i in range(6):
                await client.notify(target, b"%d" % i)
                await client.notify(other, b"%d" % i)
            await _until(lambda: len(got), 6)
            await asyncio.sleep(0.5)
            found = await reader.depth(marker)
        # pool 0 acked everything; pool 1's handler died on each: delivered, never acked
        held = {d.queue.rpartition("_")[2]: d.messages for d in found}
        assert held == {"pool0": 0, "pool1": 6}, found

    asyncio.run(check())
