"""Known answers: real plugins whose servers silently drop, duplicate and delay chosen
message numbers (:mod:`mqlab.faults.knownanswer`), so what a step must count is known
exactly; the step's own figures must find exactly that (issue 41)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from mqlab.faults.knownanswer import chosen
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
        return f'[broker]\nurl = "{broker.url}"\nmanagement_url = "{api}"', ""
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
