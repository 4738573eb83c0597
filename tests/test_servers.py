"""Broker-neutral core: per-driver URLs, only the servers plugins declare, default ports."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqlab.config.profile import Profile, parse_profile
from mqlab.errors import BrokerError, ProfileError
from mqlab.servers import managed
from mqlab.servers.handle import ServerHandle

SCENARIO = [{"pattern": "cast", "concurrency": 1}]


def _profile(
    drivers: dict[str, dict[str, object]], broker: dict[str, object] | None = None
) -> Profile:
    data: dict[str, object] = {"run": {"name": "t"}, "drivers": drivers, "scenario": SCENARIO}
    if broker is not None:
        data["broker"] = broker
    return parse_profile(data, "p.toml")


def test_a_driver_url_is_its_own_and_not_an_option_others_use_the_broker_url() -> None:
    profile = _profile(
        {
            "rmq": {"plugin": "kombu", "prefetch": 8},
            "bus": {"plugin": "loopback", "urls": ["nats://a:4222", "nats://b"]},
        },
        {"url": "amqp://guest:pw@h:5672/"},
    )
    rmq, bus = profile.drivers
    assert profile.urls_of(rmq) == ("amqp://guest:pw@h:5672/",)
    assert profile.urls_of(bus) == ("nats://a:4222", "nats://b")
    assert bus.options == () and rmq.options == (("prefetch", 8),)


def test_url_and_urls_together_or_a_url_without_scheme_are_refused() -> None:
    with pytest.raises(ProfileError, match=r"drivers\.x\.urls: give url or urls, not both"):
        _profile({"x": {"plugin": "loopback", "url": "a://h", "urls": ["a://h"]}})
    with pytest.raises(ProfileError, match=r"drivers\.x\.url: expected a URL like"):
        _profile({"x": {"plugin": "loopback", "url": "localhost:4222"}})


def test_managed_servers_hand_their_urls_only_to_the_drivers_that_declare_them() -> None:
    profile = _profile(
        {"k": {"plugin": "kombu"}, "z": {"plugin": "zmq"}, "r": {"plugin": "x", "url": "redis://r"}}
    )
    server_of = {"k": "rabbitmq", "z": None, "r": "redis"}
    assert managed.needed(server_of) == ["rabbitmq", "redis"]
    handle = ServerHandle("rabbitmq", "node", ("amqp://guest:pw@127.0.0.1:5999/",), (1,), Path())
    urls = managed.endpoints(profile, server_of, {"rabbitmq": handle})
    assert urls["k"] == ("amqp://guest:pw@127.0.0.1:5999/",)
    assert urls["r"] == ("redis://r",)
    assert managed.label(urls, server_of) == "amqp://guest:***@127.0.0.1:5999/, redis://r"
    assert managed.label({"z": ("amqp://x",)}, {"z": None}) == "none needed"


def test_an_unreachable_server_names_the_driver_and_the_port_tried() -> None:
    problem = managed.unreachable(
        {"z": ("amqp://127.0.0.1:1/",), "n": ("nats://u:pw@127.0.0.1:1",)},
        {"z": None, "n": "nats"},
    )
    assert problem is not None
    assert "127.0.0.1:1" in problem and "driver 'n'" in problem and "pw" not in problem
    assert managed.unreachable({"z": ("amqp://127.0.0.1:1/",)}, {"z": None}) is None


class _Fake:
    label = "Fake"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.events: list[str] = []

    def installed(self) -> str | None:
        return None

    def start(self, state_dir: Path, nodes: int = 1) -> ServerHandle:
        if self.fail:
            raise BrokerError("would not start")
        self.events.append(f"start {state_dir.is_dir()}")
        return ServerHandle("fake", "fake", ("fake://h",), (), state_dir)

    def stop(self, handle: ServerHandle) -> None:
        self.events.append("stop")

    def probe(self, url: str) -> tuple[None, None]:
        return None, None


def test_managed_starts_each_kind_once_and_stops_it_even_when_the_run_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, broken = _Fake(), _Fake(fail=True)
    monkeypatch.setitem(managed.STARTERS, "fake", fake)
    monkeypatch.setitem(managed.STARTERS, "broken", broken)
    with pytest.raises(RuntimeError), managed.managed(["fake"]) as handles:
        assert handles["fake"].urls == ("fake://h",)
        raise RuntimeError("the run failed")
    assert fake.events == ["start True", "stop"]
    with pytest.raises(BrokerError, match="would not start"), managed.managed(["fake", "broken"]):
        pass
    assert fake.events[-2:] == ["start True", "stop"]  # the one started is stopped again
    with (
        pytest.raises(BrokerError, match=r"cannot start a 'pulsar' server.*manages: "),
        managed.managed(["pulsar"]),
    ):
        pass
