"""Mixed steps and rolling updates as a user writes them: what validates, what is refused."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from mqlab.config.plan import layout, make_plan
from mqlab.config.profile import parse_profile

from .helpers import mqlab, write_profile

DRIVERS = """
[run]
duration = "10s"
[drivers.kombu]
plugin = "kombu"
[drivers.pika]
plugin = "pika"
[drivers.zmq]
plugin = "zmq"
[drivers.loop]
plugin = "loopback"
"""


def _validate(tmp_path: Path, scenario: str) -> tuple[int, str]:
    text = DRIVERS + '[[scenario]]\npattern = "cast"\nconcurrency = 2\n' + scenario + "\n"
    proc = mqlab("validate", str(write_profile(tmp_path / "p.toml", text)))
    return proc.returncode, proc.stderr + proc.stdout


REFUSED = {
    "families": ('roles = { servers = "zmq", clients = "kombu" }', "wire families"),
    # across families a moved client speaks only the new wire: servers must move first
    "rolling families clients first": (
        'rolling = { from = "kombu", to = "zmq", order = "clients-first" }',
        "rolling.order",
    ),
    "rolling families interleaved": (
        'rolling = { from = "zmq", to = "pika", order = "interleaved" }',
        'use order = "servers-first"',
    ),
    "in-process": ('rolling = { from = "loop", to = "kombu" }', "cannot be combined"),
    "in-process roles": ('roles = { servers = "pika", clients = "loop" }', "cannot be combined"),
    "unknown driver": ('roles = { servers = "qpid", clients = "kombu" }', "expected a driver"),
    "same driver": ('rolling = { from = "pika", to = "pika" }', "two different drivers"),
    "bad order": ('rolling = { from = "kombu", to = "pika", order = "random" }', "servers-first"),
    "bad stop": ('rolling = { from = "kombu", to = "pika", stop = "nicely" }', "graceful"),
    "no servers": ('servers = 0\nrolling = { from = "kombu", to = "pika" }', "servers >= 1"),
    # 3 servers and 1 client every 5 s: before, 4 replacements, after = 30 s > 10 s
    "short window": (
        'servers = 3\nrolling = { from = "kombu", to = "pika", interval = "5s" }',
        "need a window of 30s",
    ),
    "both": (
        'roles = { servers = "pika", clients = "kombu" }\n'
        'rolling = { from = "kombu", to = "pika" }',
        "not both",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_impossible_mixes_are_refused_in_one_line(tmp_path: Path, case: str) -> None:
    scenario, words = REFUSED[case]
    code, out = _validate(tmp_path, scenario)
    assert code == 2, out
    assert len(out.strip().splitlines()) == 1 and "Traceback" not in out
    assert words in out and "scenario[0]" in out


@pytest.mark.parametrize("pair", [("kombu", "pika"), ("kombu", "zmq"), ("zmq", "pika")])
def test_a_rolling_update_that_fits_its_window_validates(
    tmp_path: Path, pair: tuple[str, str]
) -> None:
    # across wire families too: replaced servers listen on both until the clients moved
    old, new = pair
    code, out = _validate(
        tmp_path, f'servers = 2\nrolling = {{ from = "{old}", to = "{new}", interval = "2s" }}'
    )
    assert code == 0, out


MATRIX = (
    DRIVERS
    + """
[[scenario]]
pattern = "call"
concurrency = [1, 4]
roles = [
  { servers = "kombu", clients = "kombu" }, { servers = "pika", clients = "kombu" },
  { servers = "kombu", clients = "pika" }, { servers = "pika", clients = "pika" },
]
[[scenario]]
pattern = "cast"
concurrency = 2
servers = 2
rolling = { from = "kombu", to = "pika", interval = "2s" }
"""
)


def test_matrix_runs_every_pairing_and_clients_get_their_own_driver() -> None:
    plan = make_plan(parse_profile(tomllib.loads(MATRIX)))
    labels = [s.label for s in plan.steps]
    assert labels[:4] == [
        "kombu>kombu call c=1", "kombu>pika call c=1", "pika>kombu call c=1", "pika>pika call c=1",
    ]  # fmt: skip
    assert len(plan.steps) == 8 + 1  # four pairings x two loads, one rolling update
    assert plan.steps[-1].label == "kombu=>pika cast c=2"
    mixed = plan.steps[1]  # kombu clients calling pika servers
    lay = layout(mixed, ("amqp://s/",), {}, "r", 1, False, client_urls=("amqp://c/",))
    assert {w.plugin for w in lay.servers} == {"pika"}
    assert {(w.plugin, w.urls) for w in lay.clients} == {("kombu", ("amqp://c/",))}
