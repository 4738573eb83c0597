"""The conformance kit against the NATS, Redis Streams and MQTT plugins on their managed servers."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable

import pytest
import redis

from mqlab.servers import managed
from mqlab.servers.daemons import Daemon
from mqlab.servers.handle import ServerHandle
from mqlab.testing import ConformanceSuite, Subject


def restarts(kind: str, handle: ServerHandle) -> Callable[[bool], None]:
    """The kit's Subject.restart: the managed server restarted on its port and state dir."""
    server = managed.starter(kind)
    assert isinstance(server, Daemon)
    return lambda hard: server.restart(handle, hard)


def nats_leftovers(monitor: str) -> Callable[[str], list[str]]:
    """What the server still holds for a tag: connections and subscriptions naming it."""

    def leftovers(tag: str) -> list[str]:
        with urllib.request.urlopen(f"{monitor}/connz?subs=1", timeout=5) as resp:
            connz = json.load(resp)
        found = []
        for conn in connz.get("connections") or []:
            if tag in (conn.get("name") or ""):
                found.append(f"connection {conn['name']}")
            found += [f"subscription {s}" for s in conn.get("subscriptions_list") or [] if tag in s]
        return found

    return leftovers


class TestNatsConformance(ConformanceSuite):
    @pytest.fixture
    def subject(self, nats_server: ServerHandle) -> Subject:
        return Subject(
            "nats",
            urls=nats_server.urls,
            mandatory_options={"mandatory": True},
            bad_options={"pending_messages": 0, "connect_timeout": 0},
            leftovers=nats_leftovers(str(nats_server.facts["monitor"])),
            restart=restarts("nats", nats_server),
        )


def redis_leftovers(url: str) -> Callable[[str], list[str]]:
    """Keys naming the tag: streams of servers, pools and clients that closed."""

    def leftovers(tag: str) -> list[str]:
        with redis.Redis.from_url(url) as conn:
            return [k.decode() for k in conn.scan_iter(match=f"*{tag}*")]

    return leftovers


class TestRedisStreamsConformance(ConformanceSuite):
    @pytest.fixture
    def subject(self, redis_server: ServerHandle) -> Subject:
        return Subject(
            "redis-streams",
            urls=redis_server.urls,
            at_most_once_options={"ack": "on_read"},
            bad_options={"batch": 0, "claim_idle": 0},
            leftovers=redis_leftovers(redis_server.urls[0]),
            restart=restarts("redis", redis_server),
        )


class TestMqttConformance(ConformanceSuite):
    @pytest.fixture
    def subject(self, mosquitto_server: ServerHandle) -> Subject:
        # mosquitto has no API listing subscriptions: no leftovers check
        return Subject(
            "mqtt",
            urls=mosquitto_server.urls,
            at_most_once_options={"qos": 0},
            bad_options={"inflight": 0, "session_expiry": -1},
            restart=restarts("mosquitto", mosquitto_server),
        )
