"""What a profile may ask across hosts (issue 46, stage 2), as `mqlab validate` reads it: a
broker host beside the managed broker, link events on one load host, rolling updates onto
named hosts, ``[placement]`` per host; and each thing that cannot be refused in one line
naming the field. Nothing here starts a process or reaches a host.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mqlab.config.inventory import parse_inventory
from mqlab.config.profile import load_profile

from .helpers import mqlab, write_profile
from .hostile import refused

BASE = """
[run]
duration = "12s"
warmup = "1s"
[hosts]
scheduler = "tls://10.0.0.5:8786"
certs = "certs"
servers = ["w1"]
clients = ["w1", "w2"]
brokers = ["rabbit"]
[broker]
managed = true
[drivers.kombu]
plugin = "kombu"
[drivers.pika]
plugin = "pika"
[[scenario]]
pattern = "cast"
rate = 10
drivers = ["kombu"]
[[scenario.event]]
at = "2s"
action = "cut"
host = "w2"
[[scenario]]
pattern = "cast"
concurrency = 2
servers = 2
rolling = { from = "kombu", to = "pika", interval = "2s", hosts = ["w2"] }
[placement]
clients = [0]
[placement.w1]
servers = [1]
[placement.rabbit]
broker = [0]
"""


def test_a_broker_host_link_events_rolling_hosts_and_placement_per_host_validate(
    tmp_path: Path,
) -> None:
    path = write_profile(tmp_path / "p.toml", BASE)
    proc = mqlab("validate", str(path))
    assert proc.returncode == 0, proc.stderr
    profile = load_profile(str(path))
    hosts = profile.hosts
    assert hosts is not None and hosts.brokers == ("rabbit",) and profile.placement is None
    # the top's roles on every host that runs them, a host's own table over them
    pins = {n: (c.broker, c.servers, c.clients) for n, c in hosts.placement.items()}
    assert pins == {"w1": ((), (1,), (0,)), "w2": ((), (), (0,)), "rabbit": ((0,), (), ())}
    cut = profile.scenarios[0].events[0]
    assert cut.host == "w2" and cut.label == "cut node1 on w2"
    assert profile.scenarios[1].rolling is not None
    assert profile.scenarios[1].rolling.hosts == ("w2",)


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        (
            ('brokers = ["rabbit"]', 'brokers = ["w1"]'),
            "hosts.brokers",
            "w1 is a broker host and a load host",
        ),
        (
            ('brokers = ["rabbit"]', 'brokers = ["rabbit", "r2"]'),
            "hosts.brokers",
            "one broker host per node: 2 host(s) for 1 node(s)",
        ),
        (('brokers = ["rabbit"]\n', ""), "broker.managed", "name its host in [hosts] brokers"),
        (("managed = true", "managed = false"), "hosts.brokers", "set [broker] managed = true"),
        (
            (
                'brokers = ["rabbit"]\n[broker]\nmanaged = true',
                'brokers = ["rabbit", "r2"]\n[broker]\nmanaged = true\nnodes = 2',
            ),
            "broker.nodes",
            "several broker hosts is not run yet",
        ),
        (
            ('host = "w2"', 'host = "rabbit"'),
            "scenario[0].event[0].host",
            "'rabbit' is not a load host",
        ),
        (
            ('hosts = ["w2"]', 'hosts = ["w9"]'),
            "scenario[1].rolling.hosts",
            "'w9' is not a load host",
        ),
        (
            ("[placement.w1]\nservers = [1]", '[placement.w1]\nservers = "auto"'),
            "placement.w1.servers",
            '"auto" splits this host',
        ),
        (
            ("[placement.rabbit]\nbroker = [0]", "[placement.rabbit]\nservers = [0]"),
            "placement.rabbit.servers",
            "rabbit runs no servers",
        ),
        (("[placement.w1]", "[placement.w3]"), "placement.w3", "unknown key"),
    ],
)
def test_what_cannot_run_across_hosts_is_one_line_naming_the_field(
    tmp_path: Path, change: tuple[str, str], field: str, says: str
) -> None:
    old, new = change
    assert old in BASE
    path = write_profile(tmp_path / "p.toml", BASE.replace(old, new))
    line = refused(mqlab("validate", str(path)), says)
    assert f"{path}: {field}" in line, line


def test_names_of_hosts_in_a_profile_without_hosts_are_refused(tmp_path: Path) -> None:
    text = BASE.split("[hosts]")[0] + "[broker]" + BASE.split("[broker]")[1]
    text = text.split("[placement]")[0].replace(', hosts = ["w2"]', "")
    path = write_profile(tmp_path / "p.toml", text)
    refused(mqlab("validate", str(path)), "scenario[0].event[0].host", "has no [hosts]")


def test_a_managed_server_other_than_rabbitmq_cannot_start_on_a_broker_host(
    tmp_path: Path,
) -> None:
    text = BASE.replace('[drivers.pika]\nplugin = "pika"', '[drivers.nats]\nplugin = "nats"')
    text = text.replace('to = "pika"', 'to = "kombu"').replace('from = "kombu"', 'from = "nats"')
    text = text.replace('drivers = ["kombu"]', 'drivers = ["nats"]')
    path = write_profile(tmp_path / "p.toml", text)
    refused(mqlab("validate", str(path)), "drivers.nats", "RabbitMQ nodes only")


def test_an_inventory_names_a_broker_host_and_up_prints_it_for_the_profile() -> None:
    text = (
        'certs = "certs"\n[scheduler]\naddress = "10.0.0.5"\n'
        '[[host]]\nname = "w1"\naddress = "10.0.0.6"\n'
        '[[host]]\nname = "rabbit"\naddress = "10.0.0.7"\nroles = ["brokers"]\n'
    )
    import tomllib

    inv = parse_inventory(tomllib.loads(text), "/x/hosts.toml")
    assert inv.named("brokers") == ("rabbit",) and inv.named("servers") == ("w1",)
    assert 'brokers = ["rabbit"]' in inv.hosts_table()
    mixed = text.replace('roles = ["brokers"]', 'roles = ["brokers", "clients"]')
    with pytest.raises(Exception, match="no other role beside it"):
        parse_inventory(tomllib.loads(mixed), "/x/hosts.toml")
