from __future__ import annotations

from mqlab.config.plan import Plan, Step, layout, make_plan
from mqlab.config.profile import parse_profile


def _profile(extra: str = "") -> dict[str, object]:
    import tomllib

    return tomllib.loads(
        """
[run]
repeat = 2
[drivers.a]
plugin = "loopback"
[drivers.b]
plugin = "loopback"
[[scenario]]
pattern = "call"
concurrency = [1, 10]
[[scenario]]
pattern = "notify"
rate = [100]
servers = 4
pools = 2
drivers = ["b"]
"""
        + extra
    )


def _order(plan: Plan) -> list[str]:
    return [f"{s.label} #{s.repeat + 1}" for s in plan.steps]


def test_matrix_expands_drivers_side_by_side_per_load_level() -> None:
    plan = make_plan(parse_profile(_profile()))
    # (2 drivers x 2 levels + 1 driver x 1 level) x 2 repeats
    assert len(plan.steps) == 10
    # a cell's repeats back to back, the drivers' order reversed each round: A B, B A
    assert _order(plan) == [
        "a call c=1 #1", "b call c=1 #1", "b call c=1 #2", "a call c=1 #2",
        "a call c=10 #1", "b call c=10 #1", "b call c=10 #2", "a call c=10 #2",
        "b notify 100/s #1", "b notify 100/s #2",
    ]  # fmt: skip
    assert [s.index for s in plan.steps] == list(range(10))
    assert plan.eta() > 0


def test_interleave_false_runs_the_whole_matrix_once_per_repeat() -> None:
    rounds = make_plan(parse_profile({**_profile(), "run": {"repeat": 2, "interleave": False}}))
    assert _order(rounds) == [
        "a call c=1 #1", "b call c=1 #1", "a call c=10 #1", "b call c=10 #1", "b notify 100/s #1",
        "a call c=1 #2", "b call c=1 #2", "a call c=10 #2", "b call c=10 #2", "b notify 100/s #2",
    ]  # fmt: skip


def _step(plan: Plan, label: str) -> Step:
    return next(s for s in plan.steps if s.label == label)


def test_layout_splits_clients_over_processes_and_assigns_pools() -> None:
    plan = make_plan(parse_profile(_profile()))
    call10 = _step(plan, "a call c=10")
    lay = layout(call10, ("amqp://x/",), {}, "r1", processes=3, in_process=False)
    assert [c.clients[0].concurrency for c in lay.clients] == [4, 3, 3]
    assert len({c.clients[0].client_id for c in lay.clients}) == 3
    assert len(lay.servers) == 1 and lay.groups == 1

    notify = _step(plan, "b notify 100/s")
    lay = layout(notify, ("amqp://x/",), {}, "r1", processes=2, in_process=False)
    assert lay.groups == 2
    pools = [s.servers[0].pool for s in lay.servers]
    assert len(set(pools)) == 2 and len(pools) == 4
    assert sum(c.clients[0].rate for c in lay.clients) == 100


def test_in_process_plugins_get_one_worker_with_every_role() -> None:
    plan = make_plan(parse_profile(_profile()))
    lay = layout(_step(plan, "b notify 100/s"), ("x://",), {}, "r1", 2, in_process=True)
    assert lay.servers == () and len(lay.clients) == 1
    assert len(lay.clients[0].servers) == 4 and len(lay.clients[0].clients) == 2


def test_each_step_gets_its_own_topic() -> None:
    plan = make_plan(parse_profile(_profile()))
    topics = {layout(s, ("x://",), {}, "r1", 1, False).topics for s in plan.steps}
    assert len(topics) == len(plan.steps)


def test_fanout_expects_one_copy_per_server_and_targets_spread_topics() -> None:
    import tomllib

    data = tomllib.loads(
        '[drivers.a]\nplugin = "loopback"\n[[scenario]]\npattern = "cast"\nconcurrency = 2\n'
        'fanout = true\nservers = 3\n[[scenario]]\npattern = "cast"\nconcurrency = 2\n'
        "targets = 4\n"
    )
    plan = make_plan(parse_profile(data))
    fan = layout(plan.steps[0], ("x://",), {}, "r", 1, False)
    assert fan.groups == 3
    spread = layout(plan.steps[1], ("x://",), {}, "r", 1, False)
    assert len(spread.topics) == 4 and len(spread.servers) == 4


def test_targeted_sends_pair_each_topic_only_with_its_own_servers() -> None:
    import tomllib

    data = tomllib.loads(
        '[drivers.a]\nplugin = "loopback"\n[[scenario]]\npattern = "call"\nconcurrency = 2\n'
        "targeted = true\ntargets = 3\nservers = 2\n"
    )
    step = make_plan(parse_profile(data)).steps[0]
    lay = layout(step, ("x://",), {}, "r", 1, False)
    serves = {(s.servers[0].topic, s.servers[0].name) for s in lay.servers}
    pairs = set(lay.clients[0].clients[0].pairs)
    # a call to a server on a topic it does not listen to could never arrive
    assert pairs == serves and len(pairs) == 6
