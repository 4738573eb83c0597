"""Known answers: real plugins whose servers silently drop, duplicate and delay chosen
message numbers (:mod:`mqlab.faults.knownanswer`), so what a step must count is known
exactly; the step's own figures must find exactly that (issue 41)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from mqlab.faults import knowncases
from mqlab.faults.knownanswer import chosen
from mqlab.record.step import StepRecord
from mqlab.record.wire import from_wire
from mqlab.servers.handle import ServerHandle
from tests.conftest import BrokerHandle
from tests.knownanswer import register, run

PROFILE = """
[run]
name = "known"
duration = "2s"
warmup = "0s"
drain = "15s"
processes = 1
{broker}
[drivers.known]
plugin = "known-{plugin}"
{url}
silent_drop = "{drop}"
silent_duplicate = "{dup}"
silent_delay = "{delay}"
[[scenario]]
pattern = "cast"
rate = 100
exchange = "{name}"
topic = "{name}"
"""
DROP, DUP, DELAY = "5-95%10", "120-129", "100-109"  # apart: a dropped one is not also repeated


def _where(plugin: str, request: pytest.FixtureRequest) -> tuple[str, str]:
    """The profile's broker table and the driver's url line: the session's RabbitMQ (with
    its management API, for the queue depth), a private Redis or NATS server; none for zmq."""
    if plugin == "pika":
        broker: BrokerHandle = request.getfixturevalue("broker")
        api = broker.management_url
        return f'[broker]\nurl = "{broker.url}"\nmanagement_url = "{api}"\n', ""
    if plugin == "zmq":
        return "", ""
    fixture = {"redis-streams": "redis_server", "nats": "nats_server"}[plugin]
    server: ServerHandle = request.getfixturevalue(fixture)
    return "", f'url = "{server.urls[0]}"'


@pytest.mark.parametrize("plugin", ["pika", "zmq", "redis-streams", "nats"])
def test_a_step_counts_exactly_what_the_servers_silently_dropped_and_duplicated(
    plugin: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    site = register(tmp_path / "site")
    broker, url = _where(plugin, request)
    name = f"ka-{uuid.uuid4().hex[:8]}"
    text = PROFILE.format(
        plugin=plugin, broker=broker, url=url, drop=DROP, dup=DUP, delay=DELAY, name=name
    )
    (tmp_path / "p.toml").write_text(text)
    out = tmp_path / "r.json"
    proc = run(site, str(tmp_path / "p.toml"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    (step,) = json.loads(out.read_text())["steps"]
    sent = step["sent"]
    assert sent >= 150, step  # one client, numbered 0 ..: every chosen number was sent
    expected = {
        "lost": len(chosen(DROP)), "duplicates": len(chosen(DUP)), "unaccounted": 0,
        "received": sent - len(chosen(DROP)),
    }  # fmt: skip
    found = {k: step[k] for k in expected}
    print(f"known answer {plugin}: expected {expected}, found {found}")
    assert found == expected


def test_the_chosen_numbers_are_read_as_written_and_a_mistake_is_refused() -> None:
    assert chosen("9-39%10, 3") == {3, 9, 19, 29, 39}
    assert chosen("") == frozenset()
    for bad in ("5-1", "x", "1-9%0", "0-9999999"):
        with pytest.raises(ValueError, match=r"A-B|not N"):
            chosen(bad)


#: the cases the suite runs per plugin wrapped against the session's servers; pika's node
#: kill and flow control need a managed node of their own: `mqlab selftest` runs them
SUITE = {
    "pika": ("alone", "kill_server", "cut", "delay"),
    "zmq": knowncases.PLUGINS["zmq"],
    "redis-streams": knowncases.PLUGINS["redis-streams"],
    "nats": knowncases.PLUGINS["nats"],
}


@pytest.mark.serial
@pytest.mark.parametrize("plugin", sorted(SUITE))
def test_each_known_answer_is_found_exactly_alone_and_with_each_kind_of_event(
    plugin: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # drops chosen before, during and after each event; a duplicate and a delay apart
    site = register(tmp_path / "site")
    broker, url = _where(plugin, request)
    topic = f"kc{uuid.uuid4().hex[:8]}"
    cases = SUITE[plugin]
    (tmp_path / "p.toml").write_text(knowncases.profile(plugin, cases, broker, url, topic))
    out = tmp_path / "r.json"
    proc = run(site, str(tmp_path / "p.toml"), "-o", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr
    steps = {s["scenario"]: s for s in json.loads(out.read_text())["steps"]}
    found = [knowncases.check(c, from_wire(StepRecord, steps[c])) for c in cases]
    for f in found:  # the closing note's table: per plugin and case, expected and found
        print(f"known answer {plugin} | {f.case} | expected: {f.expected} | found: {f.found}")
    wrong = [f for f in found if not f.ok]
    assert not wrong, wrong
