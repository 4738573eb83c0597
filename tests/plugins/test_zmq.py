"""The zmq plugin end to end: real sockets on 127.0.0.1, no broker.

The static matchmaker tests use a private registry directory (except the
zero-configuration cross-process test); the redis tests start their own
redis-server on a free loopback port.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import uvloop
from mqlab_zmq import ZmqTransport
from mqlab_zmq.matchmaker import StaticMatchmaker

from mqlab import registry
from mqlab.errors import (
    CallTimeout,
    ConnectionLost,
    DriverError,
    OptionError,
    Undeliverable,
)
from mqlab.servers.daemons import terminate
from mqlab.testing import core_caster
from mqlab.transport import Target, Transport, TransportConfig

EXCHANGE = "mqlab-test"
Popen = subprocess.Popen[str]


def _topic() -> str:
    return f"zmq-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def opts(tmp_path: Path) -> dict[str, Any]:
    return {"registry_dir": str(tmp_path / "registry")}


@asynccontextmanager
async def _transports(opts: dict[str, Any], *workers: str) -> AsyncIterator[list[ZmqTransport]]:
    async with AsyncExitStack() as stack:
        out = []
        for w in workers:
            out.append(await stack.enter_async_context(ZmqTransport(TransportConfig((), opts, w))))
        yield out


def _echo(name: str, seen: list[bytes]) -> Any:
    def handler(body: bytes) -> bytes:
        seen.append(body)
        return name.encode() + b":" + body

    return handler


async def _until(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(0.01)


# -- round robin and routing errors (the contract: test_conformance.py) -------


async def _call_roundtrip(opts: dict[str, Any]) -> None:
    target = Target(EXCHANGE, _topic())
    seen: list[bytes] = []
    async with _transports(opts, "server", "client") as (server, client):
        await server.serve_rpc(target.to_server("s1"), _echo("s1", seen))
        bodies = [f"m{i}".encode() for i in range(300)]
        replies = await asyncio.gather(*(client.call(target, b, 5) for b in bodies))
    assert replies == [b"s1:" + b for b in bodies]
    assert sorted(seen) == sorted(bodies)


def test_call_under_uvloop(opts: dict[str, Any]) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert isinstance(runner.get_loop(), uvloop.Loop)
        runner.run(_call_roundtrip(opts))


async def test_round_robin_over_two_servers(opts: dict[str, Any]) -> None:
    target = Target(EXCHANGE, _topic())
    seen1: list[bytes] = []
    seen2: list[bytes] = []
    async with _transports(opts, "w1", "w2", "client") as (s1, s2, client):
        await s1.serve_rpc(target.to_server("s1"), _echo("s1", seen1))
        await s2.serve_rpc(target.to_server("s2"), _echo("s2", seen2))
        replies = [await client.call(target, b"x", 5) for _ in range(10)]
        for _ in range(10):
            await client.cast(target, b"c")
        await _until(lambda: len(seen1) + len(seen2) >= 20)
    assert Counter(r.split(b":")[0] for r in replies) == {b"s1": 5, b"s2": 5}
    assert seen1.count(b"c") == seen2.count(b"c") == 5


async def test_a_call_to_an_unknown_server_names_the_topic_s_servers(
    opts: dict[str, Any],
) -> None:
    target = Target(EXCHANGE, _topic())
    async with _transports(opts, "w1", "w2", "client") as (s1, s2, client):
        await s1.serve_rpc(target.to_server("s1"), _echo("s1", []))
        await s2.serve_rpc(target.to_server("s2"), _echo("s2", []))
        with pytest.raises(
            Undeliverable, match=r"no zmq server named 's3'.*servers of this topic: s1, s2"
        ):
            await client.call(target.to_server("s3"), b"x", 5)


# -- failures -------------------------------------------------------------------


async def test_call_to_unserved_topic_fails_fast_and_says_so(opts: dict[str, Any]) -> None:
    async with _transports(opts, "client") as (client,):
        started = time.monotonic()
        with pytest.raises(Undeliverable, match=r"no zmq server serves topic 'nobody-\w+'"):
            await client.call(Target(EXCHANGE, f"nobody-{uuid.uuid4().hex[:6]}"), b"x", 2)
        assert time.monotonic() - started < 2
        with pytest.raises(Undeliverable):
            await client.cast(Target(EXCHANGE, "nobody", fanout=True), b"x")
        # a notification nobody listens to is dropped, like on an exchange with no queue
        await client.notify(Target("notifications", "nobody"), b"x")


async def test_handler_failure_reaches_the_caller_and_server_keeps_serving(
    opts: dict[str, Any],
) -> None:
    target = Target(EXCHANGE, _topic())

    def handler(body: bytes) -> bytes:
        if body == b"bad":
            raise ValueError("cannot decode")
        return body

    async with _transports(opts, "server", "client") as (server, client):
        await server.serve_rpc(target.to_server("s1"), handler)
        with pytest.raises(DriverError, match="handler failed: ValueError: cannot decode"):
            await client.call(target, b"bad", 5)
        assert await client.call(target, b"good", 5) == b"good"


async def test_closed_server_is_withdrawn_and_leaves_no_files(opts: dict[str, Any]) -> None:
    target = Target(EXCHANGE, _topic())
    opts = {**opts, "lookup_cache": 0}
    async with _transports(opts, "client") as (client,):
        async with _transports(opts, "server") as (server,):
            await server.serve_rpc(target.to_server("s1"), _echo("s1", []))
            await server.serve_notifications(Target("n", target.topic), "pool", _echo("n", []))
            assert await client.call(target, b"x", 5) == b"s1:x"
        with pytest.raises(Undeliverable):
            await client.call(target, b"x", 5)
    assert [f for _, _, files in os.walk(opts["registry_dir"]) for f in files] == []


async def test_a_stale_record_never_reaches_another_servers_handler(
    opts: dict[str, Any],
) -> None:
    # a crashed server's record whose port now belongs to someone else
    real, stale = Target(EXCHANGE, _topic()), Target(EXCHANGE, _topic())
    seen: list[bytes] = []
    async with _transports(opts, "server", "client") as (server, client):
        await server.serve_rpc(real.to_server("s1"), _echo("s1", seen))
        registry = StaticMatchmaker(Path(opts["registry_dir"]))
        (record,) = await registry.lookup(("rpc", EXCHANGE, real.topic))
        ghost = replace(record, instance=uuid.uuid4().hex, server="ghost")
        await registry.register(("rpc", EXCHANGE, stale.topic), ghost)
        with pytest.raises(Undeliverable, match="no longer belongs to zmq server 'ghost'"):
            await client.call(stale, b"misrouted", 5)
        await client.cast(stale, b"misrouted")
        assert await client.call(real, b"ok", 5) == b"s1:ok"
        await asyncio.sleep(0.2)  # time for the cast to arrive, were it accepted
        await registry.unregister(("rpc", EXCHANGE, stale.topic), ghost)
    assert seen == [b"ok"]


def test_bad_option_values_are_refused_with_the_option_named() -> None:
    check = registry.get("zmq").check
    with pytest.raises(OptionError, match=r"'linger'.*>= 0"):
        check({"linger": -1})
    with pytest.raises(OptionError, match=r"'host'.*listens everywhere"):
        check({"bind_address": "0.0.0.0"})
    with pytest.raises(OptionError, match=r"'matchmaker'.*'static', 'redis'"):
        check({"matchmaker": "dns"})
    assert check({"bind_address": "0.0.0.0", "host": "10.0.0.5"})["host"] == "10.0.0.5"


# -- servers in another process ---------------------------------------------------

SERVER = """
import asyncio, json, os, sys
from mqlab.transport import Target, TransportConfig
from mqlab_zmq import ZmqTransport
from mqlab_zmq.matchmaker import StaticMatchmaker

args = json.loads(sys.argv[1])

async def main():
    config = TransportConfig(tuple(args["urls"]), args["opts"], "server-proc")
    async with ZmqTransport(config) as t:
        pid = str(os.getpid()).encode()
        await t.serve_rpc(Target(args["exchange"], args["topic"], args["server"]),
                          lambda body: pid + b":" + body)
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""


@pytest.fixture
def spawn() -> Iterator[Any]:
    procs: list[Popen] = []

    def start(
        topic: str, opts: dict[str, Any], urls: tuple[str, ...] = ()
    ) -> subprocess.Popen[str]:
        args = {"urls": urls, "opts": opts, "exchange": EXCHANGE, "topic": topic, "server": "p1"}
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, json.dumps(args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(5)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


async def test_server_in_another_process_zero_configuration(spawn: Any) -> None:
    # no registry_dir: both sides derive the same registry from the profile's URL
    urls = ("amqp://guest:guest@127.0.0.1:5672/",)
    topic = _topic()
    proc = spawn(topic, {}, urls)
    target = Target(EXCHANGE, topic)
    async with ZmqTransport(TransportConfig(urls, {"lookup_cache": 0}, "client")) as client:
        replies = await asyncio.gather(*(client.call(target, b"%d" % i, 5) for i in range(50)))
        assert replies == [f"{proc.pid}:{i}".encode() for i in range(50)]
        assert await client.call(target.to_server("p1"), b"t", 5) == f"{proc.pid}:t".encode()
        # a clean exit withdraws the server
        assert proc.stdin is not None
        proc.stdin.close()
        await asyncio.to_thread(proc.wait, 10)
        with pytest.raises(Undeliverable):
            await client.call(target, b"x", 5)


def _caster(client: Transport, way: str) -> Callable[[Target, bytes], Awaitable[None]]:
    """``client.cast``, or a cast sent as mqlab's senders send one."""
    return client.cast if way == "cast" else core_caster(client)


@pytest.mark.parametrize("way", ["cast", "begin_cast"])
async def test_casts_beyond_the_high_water_mark_wait_and_arrive_in_order(
    opts: dict[str, Any], way: str
) -> None:
    # at hwm 5, thousands of casts at once wait for room: none lost, none reordered
    small = {**opts, "hwm": 5}
    target = Target(EXCHANGE, _topic())
    seen: list[bytes] = []
    async with _transports(small, "server", "client") as (server, client):
        cast = _caster(client, way)
        await server.serve_rpc(target.to_server("s1"), seen.append)
        # once the lookup is done, every cast below is queued in turn
        await asyncio.wait_for(cast(target, b"first"), 10)
        bodies = [b"%d" % i for i in range(5000)]
        await asyncio.wait_for(asyncio.gather(*(cast(target, b) for b in bodies)), 30)
        await _until(lambda: len(seen) == len(bodies) + 1, 10)
    assert seen == [b"first", *bodies]


@pytest.mark.parametrize("way", ["cast", "begin_cast"])
async def test_a_busy_client_keeps_its_order_across_matchmaker_refreshes(
    opts: dict[str, Any], way: str
) -> None:
    # 20 senders number their casts from one counter, as a step's client does; the
    # lookup expires each second (the default). Had the senders all waited at its expiry
    # for the next lookup, they would resume in another order than they were numbered
    target = Target(EXCHANGE, _topic())
    seen: list[int] = []
    numbers = iter(range(10**9))
    async with _transports({**opts, "lookup_cache": 1}, "server", "client") as (server, client):
        cast = _caster(client, way)
        await server.serve_rpc(target.to_server("s1"), lambda body: seen.append(int(body)))
        # the first lookup, before the senders start: they would all wait for it, as
        # for any lookup not yet made (not what this test is about)
        await cast(target, b"%d" % next(numbers))
        end = time.monotonic() + 2.2  # two expiries

        async def sender() -> None:
            while time.monotonic() < end:
                for _ in range(16):  # then yield, as a step's sender does
                    await cast(target, b"%d" % next(numbers))
                await asyncio.sleep(0)

        await asyncio.gather(*(sender() for _ in range(20)))
        sent = next(numbers)
        await _until(lambda: len(seen) == sent, 10)
    assert len(seen) == sent > 1000
    assert seen == sorted(seen)


async def test_the_cores_casts_go_to_the_server_that_replaced_the_first(
    opts: dict[str, Any],
) -> None:
    # the core's sender casts to one Target object, message after message: the route it
    # takes (kept between casts) must be looked up again as the matchmaker's answer
    # changes, so casts reach the server that replaced the first one, none refused
    target = Target(EXCHANGE, _topic())
    first: list[bytes] = []
    second: list[bytes] = []
    async with _transports({**opts, "lookup_cache": 0.3}, "client") as (client,):
        cast = core_caster(client)
        async with _transports(opts, "first") as (server,):
            await server.serve_rpc(target.to_server("s1"), first.append)
            for body in (b"lookup", b"known"):  # the first looks up, the second goes straight
                await cast(target, body)
            await _until(lambda: len(first) == 2)
        async with _transports(opts, "second") as (server,):
            await server.serve_rpc(target.to_server("s2"), second.append)
            await asyncio.sleep(0.4)  # the first server's lookup has expired
            for i in range(200):
                await cast(target, b"%d" % i)
                await asyncio.sleep(0.005)  # past a refresh of the lookup, too
            await _until(lambda: len(second) == 200)
    assert first == [b"lookup", b"known"] and second == [b"%d" % i for i in range(200)]


async def test_servers_closed_and_replaced_in_one_event_loop_each_get_their_casts(
    opts: dict[str, Any],
) -> None:
    # a server's cast loop waits on the event loop's own reader of its socket's descriptor;
    # a closed server must take that reader away, or the next server, whose socket gets
    # the same descriptor number, is watched through the closed one's
    target = Target(EXCHANGE, _topic())
    async with _transports({**opts, "lookup_cache": 0}, "client") as (client,):
        for turn in range(3):
            seen: list[bytes] = []
            async with _transports(opts, f"server{turn}") as (server,):
                await server.serve_rpc(target.to_server("s1"), seen.append)
                bodies = [b"%d-%d" % (turn, i) for i in range(100)]
                for body in bodies:
                    await client.cast(target, body)
                await _until(lambda got=seen: len(got) == 100)
            assert seen == bodies


async def test_cast_to_a_killed_server_fails_within_send_timeout(
    spawn: Any, opts: dict[str, Any]
) -> None:
    topic = _topic()
    proc = spawn(topic, opts)
    target = Target(EXCHANGE, topic)
    # a long lookup_cache keeps the dead server's record in the client's cache
    client_opts = {**opts, "send_timeout": 0.3, "lookup_cache": 60}
    async with ZmqTransport(TransportConfig((), client_opts, "client")) as client:
        await client.call(target, b"x", 5)
        await client.cast(target, b"x")
        proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(proc.wait, 10)
        await asyncio.sleep(0.2)  # zmq notices the closed connection
        started = time.monotonic()
        with pytest.raises(ConnectionLost, match="did not take the message in time"):
            await client.cast(target, b"y")
        assert 0.25 < time.monotonic() - started < 2
        with pytest.raises(CallTimeout, match=r"no reply from zmq server 'p1' .* within 0.3s"):
            await client.call(target, b"y", 0.3)


async def test_call_in_flight_to_a_dead_server_ends_when_the_matchmaker_forgets_it(
    spawn: Any, opts: dict[str, Any]
) -> None:
    topic = _topic()
    proc = spawn(topic, opts)
    target = Target(EXCHANGE, topic)
    async with ZmqTransport(TransportConfig((), {**opts, "lookup_cache": 0.3}, "c")) as client:
        await client.call(target, b"x", 5)
        proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(proc.wait, 10)
        started = time.monotonic()
        stuck = asyncio.create_task(client.call(target, b"y", 10))
        await asyncio.sleep(0.4)
        # the next lookup finds the server's pid gone and drops its record
        with pytest.raises(Undeliverable):
            await client.call(target, b"z", 5)
        with pytest.raises(ConnectionLost, match="left the matchmaker"):
            await stuck
        assert time.monotonic() - started < 2


async def test_close_ends_calls_still_waiting(opts: dict[str, Any]) -> None:
    target = Target(EXCHANGE, _topic())
    async with _transports(opts, "server") as (server,):
        await server.serve_rpc(target.to_server("s1"), lambda body: None)  # never replies
        client = ZmqTransport(TransportConfig((), opts, "client"))
        await client.start()
        waiting = asyncio.create_task(client.call(target, b"x", 30))
        await asyncio.sleep(0.1)
        await asyncio.wait_for(client.aclose(), 3)
        with pytest.raises(ConnectionLost, match="closed while the message was in flight"):
            await waiting


# -- redis matchmaker ---------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    port = _free_port()
    with tempfile.TemporaryDirectory() as workdir:
        proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--dir",
                workdir,
            ],
            stdout=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), 0.5) as s:
                        s.sendall(b"PING\r\n")
                        if s.recv(16).startswith(b"+PONG"):
                            break
                except OSError:
                    pass
                assert proc.poll() is None, "redis-server exited"
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            assert terminate(proc), f"redis-server {proc.pid} did not exit after SIGKILL"


def _redis_keys(url: str) -> list[str]:
    import redis

    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        return sorted(str(k) for k in client.keys("mqlab-zmq:*"))
    finally:
        client.close()


@pytest.mark.redis
async def test_redis_server_registers_and_client_finds_it(redis_url: str) -> None:
    opts = {"matchmaker": "redis", "redis_url": redis_url}
    target = Target(EXCHANGE, _topic())
    notes = Target("notifications", target.topic)
    seen: list[bytes] = []
    before = set(_redis_keys(redis_url))
    async with _transports(opts, "server", "client") as (server, client):
        await server.serve_rpc(target.to_server("s1"), _echo("s1", []))
        await server.serve_notifications(notes, "pool", _echo("n", seen))
        assert any(target.topic in k for k in _redis_keys(redis_url))
        assert await client.call(target, b"x", 5) == b"s1:x"
        assert await client.call(target.to_server("s1"), b"y", 5) == b"s1:y"
        await client.notify(notes, b"n")
        await _until(lambda: seen == [b"n"])
        assert seen == [b"n"]
    # unregistered on close: nothing left in redis
    assert set(_redis_keys(redis_url)) <= before


@pytest.mark.redis
async def test_redis_expired_registration_is_no_longer_used(redis_url: str, spawn: Any) -> None:
    topic = _topic()
    proc = spawn(topic, {"matchmaker": "redis", "redis_url": redis_url, "ttl": 1})
    target = Target(EXCHANGE, topic)
    opts = {"matchmaker": "redis", "redis_url": redis_url, "lookup_cache": 0.1}
    async with ZmqTransport(TransportConfig((), opts, "client")) as client:
        assert await client.call(target, b"x", 5) == f"{proc.pid}:x".encode()
        await asyncio.sleep(1.5)  # the server refreshes its registration: still there
        assert await client.call(target, b"x", 5) == f"{proc.pid}:x".encode()
        proc.send_signal(signal.SIGKILL)  # dies without unregistering
        await asyncio.to_thread(proc.wait, 10)
        with pytest.raises(CallTimeout):
            await client.call(target, b"x", 0.3)
        await asyncio.sleep(1.2)
        started = time.monotonic()
        with pytest.raises(Undeliverable, match=r"no zmq server serves .* redis matchmaker"):
            await client.call(target, b"x", 2)
        assert time.monotonic() - started < 1
