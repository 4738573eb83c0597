"""Fault events in a profile: read, refused in one line when the host or broker cannot
perform them, and the per-event figures and promise verdict (issue 13)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqlab import netns
from mqlab.config.profile import parse_profile
from mqlab.console.cli import main
from mqlab.faults import verdict
from mqlab.record.events import FaultFigure, Phase

from .helpers import write_profile

MANAGED = '[run]\nduration = "20s"\n[broker]\nmanaged = true\nnodes = 3\n'
KOMBU = '[drivers.kombu]\nplugin = "kombu"\nretry = 3\n'
CAST = '[[scenario]]\npattern = "cast"\nrate = 10\n'


def _validate(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["validate", str(write_profile(tmp_path / "p.toml", text))])
    return code, capsys.readouterr().err


def test_events_are_read_sorted_and_run_wide_ones_reach_every_scenario() -> None:
    text = {
        "run": {"duration": "30s"},
        "broker": {"managed": True, "nodes": 3},
        "drivers": {"kombu": {"plugin": "kombu"}},
        "event": [{"at": "25s", "action": "start_node", "node": "node2"}],
        "scenario": [
            {"pattern": "cast", "rate": 10, "event": [
                {"at": "10s", "action": "kill_node", "node": "queues"},
                {"at": "5s", "action": "delay", "ms": 200, "jitter_ms": 20},
            ]},
            {"pattern": "call", "concurrency": 1},
        ],
    }  # fmt: skip
    p = parse_profile(text)
    first, second = p.scenarios
    assert [(e.at, e.action) for e in first.events] == [
        (5.0, "delay"), (10.0, "kill_node"), (25.0, "start_node"),
    ]  # fmt: skip
    assert first.events[0].label == "delay node1 200 ms ± 20"
    assert first.events[1].node == "queues"
    assert [e.action for e in second.events] == ["start_node"]


# (profile text, the field the one line names, words it holds)
REFUSED = {
    "node action, no managed broker": (
        '[run]\nduration = "20s"\n'
        + KOMBU
        + CAST
        + '[[scenario.event]]\nat = "5s"\naction = "kill_node"\n',
        "scenario[0].event[0].action",
        "managed = true",
    ),
    "node beyond the cluster": (
        MANAGED + KOMBU + CAST + '[[scenario.event]]\nat = "5s"\naction = "stop_node"\n'
        'node = "node4"\n',
        "scenario[0].event[0].node",
        "3 node(s)",
    ),
    "loss on a brokerless driver": (
        '[drivers.zmq]\nplugin = "zmq"\n'
        + CAST
        + '[[scenario.event]]\nat = "5s"\naction = "loss"\npercent = 5\n',
        "scenario[0].event[0].action",
        "sits between workers and a server",
    ),
    "outside the window": (
        MANAGED + KOMBU + CAST + '[[scenario.event]]\nat = "20s"\naction = "kill_server"\n',
        "scenario[0].event[0].at",
        "not inside the 20 s window",
    ),
    "unknown action": (
        MANAGED + KOMBU + CAST + '[[scenario.event]]\nat = "5s"\naction = "explode"\n',
        "scenario[0].event[0].action",
        "expected one of stop_node",
    ),
    "a key the action does not take": (
        MANAGED + KOMBU + CAST + '[[scenario.event]]\nat = "5s"\naction = "cut"\nms = 3\n',
        "scenario[0].event[0].ms",
        "unknown key",
    ),
    "a server the scenario lacks": (
        MANAGED + KOMBU + CAST + 'servers = 1\n[[scenario.event]]\nat = "5s"\n'
        'action = "kill_server"\nserver = 2\n',
        "scenario[0].event[0].server",
        "1 server worker(s)",
    ),
    "worker action on an in-process driver": (
        '[run]\nduration = "20s"\n[drivers.lb]\nplugin = "loopback"\n'
        + CAST
        + '[[scenario.event]]\nat = "5s"\naction = "kill_server"\n',
        "scenario[0].event[0].action",
        "in-process",
    ),
    "a node fault with a driver on a broker mqlab runs unreplicated": (
        MANAGED
        + '[drivers.nats]\nplugin = "nats"\n'
        + CAST
        + '[[scenario.event]]\nat = "5s"\naction = "kill_node"\nnode = "node1"\n',
        "scenario[0].event[0].action",
        "needs every driver's broker to be one mqlab manages (rabbitmq, kafka, artemis)",
    ),
    "Artemis' backup is its last node": (
        MANAGED
        + '[drivers.artemis]\nplugin = "amqp1"\nbroker = "artemis"\n'
        + CAST
        + '[[scenario.event]]\nat = "5s"\naction = "kill_node"\nnode = "node3"\n',
        "scenario[0].event[0].node",
        "node3: the managed broker has 2 node(s)",
    ),
    "a node fault on a single managed Kafka": (
        MANAGED.replace("nodes = 3", "nodes = 1")
        + '[drivers.kafka]\nplugin = "kafka"\n'
        + CAST
        + '[[scenario.event]]\nat = "5s"\naction = "kill_node"\nnode = "node1"\n',
        "scenario[0].event[0].action",
        "kill_node: a single managed Kafka cannot be stopped and started as a node",
    ),
    "a RabbitMQ action on Kafka": (
        MANAGED
        + '[drivers.kafka]\nplugin = "kafka"\n'
        + CAST
        + '[[scenario.event]]\nat = "5s"\naction = "close_connections"\nnode = "node1"\n',
        "scenario[0].event[0].action",
        "close_connections is RabbitMQ's (its management API); kafka has it not",
    ),
    "delay without ms": (
        MANAGED + KOMBU + CAST + '[[scenario.event]]\nat = "5s"\naction = "delay"\n',
        "scenario[0].event[0].ms",
        "needs ms",
    ),
    "run-wide event with a bad time": (
        MANAGED + KOMBU + '[[event]]\nat = "soon"\naction = "cut"\n' + CAST,
        "event[0].at",
        "",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_an_event_the_host_or_broker_cannot_perform_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    text, field, words = REFUSED[case]
    code, err = _validate(tmp_path, text, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert field in lines[0] and words in lines[0], lines[0]
    assert "Traceback" not in err


def test_a_profile_with_events_the_broker_can_perform_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        MANAGED
        + KOMBU
        + CAST
        + (
            '[[scenario.event]]\nat = "5s"\naction = "kill_node"\nnode = "queues"\n'
            '[[scenario.event]]\nat = "8s"\naction = "memory_alarm"\non = false\nnode = "node3"\n'
            '[[scenario.event]]\nat = "9s"\naction = "restart_server"\n'
        )
    )
    code, err = _validate(tmp_path, text, capsys)
    assert code == 0, err


def test_loss_on_a_host_without_nftables_is_refused_naming_the_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(netns, "missing", lambda: "the nft command (apt-get install nftables)")
    text = MANAGED + KOMBU + CAST + '[[scenario.event]]\nat = "5s"\naction = "loss"\npercent = 5\n'
    code, err = _validate(tmp_path, text, capsys)
    assert code == 2 and "scenario[0].event[0].action" in err and "apt-get install nftables" in err
    monkeypatch.undo()
    code, err = _validate(tmp_path, text, capsys)
    assert code == 0, err  # this machine has root, ip and nft (scripts/setup.sh installs nft)


def _events(
    phases: list[Phase],
    series: list[int],
    errors: list[int],
    retry: int | None = 3,
    lost: int = 0,
    dup: int = 0,
) -> list[FaultFigure]:
    """Each event's figures; the last event's own (lost, duplicated) as the account gave it."""
    kept = verdict.promise({} if retry is None else {"retry": retry})
    caused = {phases[-1].name: (lost, dup)}
    return verdict.per_event(phases, 1, 12, series, errors, caused, 0, kept)


# a window of 12 s (series index 1 is its first second): steady 100/s, the event at 4 s
# takes throughput down for 2 s, it is back from 7 s on
STEADY = [0, 100, 100, 100, 100, 100, 10, 0, 100, 100, 100, 100, 100]
PHASES = [Phase(name="before", start_s=0.0, end_s=4.0),
          Phase(name="kill_node node1", start_s=4.0, end_s=12.0)]  # fmt: skip


def test_detection_and_recovery_are_read_from_the_series() -> None:
    [f] = _events(PHASES, STEADY, [0] * 13)
    assert f.detected_by == "throughput"
    assert f.detect_s == 2.0  # the second 5-6 s is the first under half: at most 2 s
    assert f.recover_s == 3.0  # from 7 s, three seconds at 90 % or more
    assert f.verdict == "kept"


def test_an_error_detects_the_event_before_throughput_falls() -> None:
    errors = [0] * 13
    errors[5] = 4  # the second 4-5 s
    [f] = _events(PHASES, STEADY, errors)
    assert (f.detected_by, f.detect_s, f.errors) == ("error", 1.0, 4)


def test_no_recovery_within_the_window_is_said_as_none() -> None:
    flat = STEADY[:6] + [0] * 7
    [f] = _events(PHASES, flat, [0] * 13)
    assert f.recover_s is None


@pytest.mark.parametrize(
    ("retry", "lost", "dup", "expected"),
    [
        (3, 5, 0, "broken"),  # retries promise no loss
        (-1, 1, 0, "broken"),  # retrying forever too
        (3, 0, 9, "kept"),  # duplicates are allowed at least once
        (0, 7, 0, "kept"),  # at most once may lose
        (0, 0, 1, "broken"),  # but never duplicate
    ],
)
def test_the_verdict_holds_the_driver_to_its_promise(
    retry: int, lost: int, dup: int, expected: str
) -> None:
    [f] = _events(PHASES, STEADY, [0] * 13, retry, lost, dup)
    assert f.verdict == expected


def test_a_driver_without_retry_promises_nothing() -> None:
    [f] = _events(PHASES, STEADY, [0] * 13, None, 5, 5)
    assert (f.verdict, f.promise) == ("no promise", None)


def test_a_drop_after_the_next_event_is_that_event_s() -> None:
    phases = [Phase(name="before", start_s=0.0, end_s=4.0),
              Phase(name="kill_node node1", start_s=4.0, end_s=8.0),
              Phase(name="start_node node1", start_s=8.0, end_s=12.0)]  # fmt: skip
    series = [0, 100, 100, 100, 100, 100, 100, 100, 100, 20, 100, 100, 100]
    kill, start = _events(phases, series, [0] * 13, 1)
    assert kill.detect_s is None and kill.recover_s is None
    assert start.detect_s == 1.0 and start.recover_s == 1.0
