"""Queue types and placement in a profile, a plan and the tables (no broker needed)."""

from __future__ import annotations

import tomllib

import pytest

from mqlab.config.plan import layout, make_plan
from mqlab.config.profile import Profile, parse_profile
from mqlab.errors import ProfileError
from mqlab.live.snapshot import StepRow
from mqlab.live.tables import plain_line

URLS = tuple(f"amqp://guest:guest@127.0.0.1:{5670 + k}/" for k in (1, 2, 3))


def _profile(scenario: str, broker: str = "", driver: str = "") -> Profile:
    text = (
        f"[broker]\nurl = [{', '.join(repr(u) for u in URLS)}]\n{broker}\n"
        f'[drivers.k]\nplugin = "kombu"\n{driver}\n'
        f"[[scenario]]\nconcurrency = 2\n{scenario}\n"
    )
    return parse_profile(tomllib.loads(text), "p.toml")


def test_each_pattern_reads_its_own_queue_type_and_a_driver_may_pin_one() -> None:
    both = 'rpc_queue_type = "mirrored"\nnotify_queue_type = "quorum"\n'
    call = make_plan(_profile('pattern = "call"\n' + both)).steps[0]
    notify = make_plan(_profile('pattern = "notify"\n' + both)).steps[0]
    assert (call.queue_type, notify.queue_type) == ("mirrored", "quorum")
    pinned = _profile('pattern = "call"\n' + both, driver='rpc_queue_type = "classic"')
    assert make_plan(pinned).steps[0].queue_type == "classic"


@pytest.mark.parametrize(
    ("scenario", "broker", "field", "says"),
    [
        ('pattern = "call"\nrpc_queue_type = "ha"', "", "scenario[0].rpc_queue_type", "quorum"),
        ('pattern = "call"', 'clients = "node4"', "broker.clients", "has 3"),
        ('pattern = "call"\nservers_on = "master"', "", "scenario[0].servers_on", "spread"),
    ],
)
def test_a_bad_queue_type_or_node_is_refused_naming_the_field(
    scenario: str, broker: str, field: str, says: str
) -> None:
    with pytest.raises(ProfileError) as err:
        _profile(scenario, broker)
    assert field in str(err.value) and says in str(err.value)


def test_workers_connect_to_their_node_first_and_fail_over_to_the_others() -> None:
    prof = _profile('pattern = "call"\nservers = 2\nclients_on = "node3"', 'servers = "spread"')
    step = make_plan(prof).steps[0]
    lay = layout(step, URLS, {}, "r", 2, False, placement=(prof.broker.clients, "spread"))
    a, b, c = URLS
    assert [w.urls for w in lay.clients] == [(c, a, b), (c, a, b)]
    assert [w.urls for w in lay.servers] == [(a, b, c), (b, a, c)]
    assert all(w.queue_type == "classic" for w in (*lay.clients, *lay.servers))


def test_the_line_says_the_queue_type_and_each_nodes_cpu() -> None:
    row = StepRow(
        0, "k", "call", "c=2", "done", cpu_broker=30.0, queue_type="quorum",
        cpu_nodes=(("node1", 20.0), ("node2", 6.0), ("node3", 4.0)),
    )  # fmt: skip
    line = plain_line(row, 1)
    assert "k call (quorum) c=2" in line
    assert "[n1 20 n2 6 n3 4]" in line
