"""The amqp1 driver on ActiveMQ Artemis (``broker = "artemis"``), a private broker (never skipped).

The same driver as on RabbitMQ; only the addresses differ: anycast queues for a
topic's and a server's calls and casts, multicast addresses for fanout casts and
notifications, one shared queue per listener pool.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from mqlab import registry
from mqlab.ceiling import refloop
from mqlab.errors import DriverError
from mqlab.sdk.reference import ReferenceSpec
from mqlab.servers.handle import ServerHandle
from mqlab.transport import Target, Transport
from tests.conftest import BrokerHandle
from tests.helpers import mqlab, results

SETTLEMENT = {"settled": [], "presettled": ["call", "cast", "notify"]}


def _transport(server: ServerHandle, worker: str, presettled: list[str]) -> Transport:
    options = {"broker": "artemis", "presettled": presettled}
    return registry.get("amqp1").build(server.urls, options, worker)


async def _until(done: Callable[[], bool], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not done() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)  # anything more would be a duplicate


@pytest.mark.parametrize("settlement", sorted(SETTLEMENT))
def test_call_cast_and_notify_reach_artemis_consumers_once_each(
    artemis_server: ServerHandle, settlement: str
) -> None:
    presettled = SETTLEMENT[settlement]
    rpc = Target(f"ex{uuid.uuid4().hex[:8]}", "compute")
    notes = Target(f"notifications{uuid.uuid4().hex[:8]}", "telemetry")
    got: dict[str, list[bytes]] = {name: [] for name in ("s1", "s2", "a1", "a2", "b")}

    def handler(name: str) -> Callable[[bytes], bytes]:
        def handle(body: bytes) -> bytes:
            got[name].append(body)
            return b"re:" + body

        return handle

    async def check() -> None:
        def make(worker: str) -> Transport:
            return _transport(artemis_server, worker, presettled)

        async with (
            make("s1") as s1, make("s2") as s2, make("a1") as a1, make("a2") as a2,
            make("b") as b, make("client") as client,
        ):  # fmt: skip
            await s1.serve_rpc(rpc.to_server("s1"), handler("s1"))
            await s2.serve_rpc(rpc.to_server("s2"), handler("s2"))
            await a1.serve_notifications(notes, "pool-a", handler("a1"))
            await a2.serve_notifications(notes, "pool-a", handler("a2"))
            await b.serve_notifications(notes, "pool-b", handler("b"))
            # a call to the topic goes to one server; to a named server, to that one
            assert await client.call(rpc, b"call", 10) == b"re:call"
            assert await client.call(rpc.to_server("s2"), b"call-s2", 10) == b"re:call-s2"
            casts = [b"cast%d" % i for i in range(40)]
            for body in casts:
                await client.cast(rpc, body)
            await client.cast(replace(rpc, fanout=True), b"fanout")
            sent = [b"note%d" % i for i in range(40)]
            for body in sent:
                await client.notify(notes, body)
            rpc_seen = lambda: len(got["s1"]) + len(got["s2"])  # noqa: E731
            await _until(lambda: rpc_seen() >= 44 and len(got["b"]) >= 40)
            # anycast: each cast to the topic reached exactly one of its servers
            everything = sorted(got["s1"] + got["s2"])
            assert everything == sorted([b"call", b"call-s2", *casts, b"fanout", b"fanout"])
            assert b"call-s2" in got["s2"]
            # multicast: each server its own fanout copy, each pool its own copy of each
            # notification, shared by the pool's listeners
            assert got["s1"].count(b"fanout") == got["s2"].count(b"fanout") == 1
            assert sorted(got["a1"] + got["a2"]) == sorted(sent)
            assert sorted(got["b"]) == sorted(sent)

    asyncio.run(check())


def test_one_run_on_both_brokers_loses_nothing_and_samples_each_broker_s_cpu(
    artemis_server: ServerHandle, broker: BrokerHandle, tmp_path: Path
) -> None:
    """`mqlab run`: the same driver on RabbitMQ and on Artemis, call, cast and notify on
    Artemis with nothing lost, and each step's broker CPU taken from its own broker."""
    profile = tmp_path / "brokers.toml"
    profile.write_text(
        '[run]\nname = "brokers"\nduration = "1s"\nwarmup = "0.5s"\n'
        f'[drivers.rabbitmq]\nplugin = "amqp1"\nurl = "{broker.url}"\n'
        f'[drivers.artemis]\nplugin = "amqp1"\nbroker = "artemis"\n'
        f'url = "{artemis_server.urls[0]}"\n'
        '[[scenario]]\npattern = "call"\nconcurrency = [4]\ndrivers = ["artemis"]\n'
        '[[scenario]]\npattern = "cast"\nconcurrency = [4]\n'
        '[[scenario]]\npattern = "notify"\nconcurrency = [4]\ndrivers = ["artemis"]\n'
    )
    out = tmp_path / "results.json"
    done = mqlab("run", str(profile), "-q", "-o", str(out), timeout=300)
    assert done.returncode == 0, done.stderr
    steps = results(out)["steps"]
    ran = [(s["driver"], s["pattern"]) for s in steps]
    assert ran == [
        ("artemis", "call"), ("rabbitmq", "cast"), ("artemis", "cast"), ("artemis", "notify")
    ]  # fmt: skip
    for step in steps:
        assert step["sent"] > 0
        assert step["received"] == step["expected"], step["pattern"]
        assert step["lost"] == 0 and step["duplicates"] == 0, step["pattern"]
    sampled = {s["driver"]: s["cpu"]["broker_process"] for s in steps}
    assert sampled["artemis"]["pid"] == artemis_server.pids[0]
    assert sampled["rabbitmq"]["name"] == "beam.smp"


def test_a_rabbitmq_queue_type_is_refused_on_artemis_not_ignored(
    artemis_server: ServerHandle,
) -> None:
    async def check() -> None:
        async with _transport(artemis_server, "s1", []) as server:
            quorum = Target(f"ex{uuid.uuid4().hex[:8]}", "t", queue_type="quorum")
            with pytest.raises(DriverError, match="quorum queues are RabbitMQ's; Artemis has none"):
                await server.serve_rpc(quorum.to_server("s1"), lambda body: None)

    asyncio.run(check())


def test_the_reference_loop_runs_on_artemis_s_anycast_queue(artemis_server: ServerHandle) -> None:
    """`mqlab ceiling`'s loop for an artemis driver: proton alone, on an address Artemis
    creates (no AMQP 0-9-1 declaration: Artemis has no 0-9-1 port)."""

    async def warm() -> None:
        # as after a step: a JVM serving its first AMQP connection is slow enough to
        # let the loop's window (opened before its publisher starts) pass unseen
        async with _transport(artemis_server, "warm", []) as client:
            await client.notify(Target("warm", "up"), b"x")

    asyncio.run(warm())
    options = registry.get("amqp1").check({"broker": "artemis"})
    spec = ReferenceSpec(artemis_server.urls, f"ref-{uuid.uuid4().hex[:8]}", 200, options)
    got = asyncio.run(refloop.measure("amqp1", spec, 2.0, 2.0))
    assert got.received_per_s > 0
