"""A link fault still in force when a step ends holds data: held, not lost (issue 33, class 6).

A cut never restored, a 60 s delay or a 1 kbit/s limit holds what pika published
after it in the fault proxy, its sockets and the client's buffers. The drain used to
end "idle" after 0.1 s and call all of it lost, with a "broken" verdict for a driver
promising no loss. Now the drain asks the proxies, ends "held", and the step's account
puts those messages in its bucket ``held`` (by the fault, as many as the proxy's bytes can
hold; in the step's ``unaccounted``), never in ``lost``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from mqlab.console.cli import main
from mqlab.results import read
from tests.conftest import BrokerHandle

from . import results_fixtures as fx
from .helpers import mqlab, write_profile
from .hostile import strict_json

PROFILE = """
[run]
name = "held"
duration = "2s"
warmup = "0s"
drain = "20s"
[broker]
url = "{url}"
management_url = "{api}"
[drivers.pika]
plugin = "pika"
retry = 3
[[scenario]]
pattern = "cast"
rate = 100
exchange = "{name}"
topic = "{name}"
[[scenario.event]]
at = "1s"
action = "{action}"
{extra}
"""

# (action, its keys, the event's label as the step names it)
FAULTS = {
    "cut": ("cut", "", "cut node1"),
    "delay": ("delay", "ms = 60000", "delay node1 60000 ms ± 0"),
    "bandwidth": ("bandwidth", "kbps = 1", "bandwidth node1 1 kbit/s"),
}


@pytest.mark.broker
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_link_fault_never_restored_holds_its_messages_it_does_not_lose_them(
    broker: BrokerHandle, tmp_path: Path, fault: str
) -> None:
    action, extra, label = FAULTS[fault]
    name = f"i33c-held-{uuid.uuid4().hex[:8]}"
    text = PROFILE.format(
        url=broker.url, api=broker.management_url, name=name, action=action, extra=extra
    )
    out = tmp_path / "r.json"
    proc = mqlab("run", str(write_profile(tmp_path / "p.toml", text)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    # the fault proxy's asyncio tracebacks (connections it holds, then ends) stay off screen
    assert "Traceback" not in proc.stderr and "asyncio" not in proc.stderr, proc.stderr
    (step,) = strict_json(out)["steps"]
    assert step["sent"] > step["received"] > 0  # the fault held what came after it
    # the drain ended because the fault holds the rest, not because nothing came for 0.1 s
    assert step["drain_end"] == "held", step["drain_end"]
    held = step["held"]
    assert held["by"] == [label]
    assert held["messages"] > 0 and held["proxy_bytes"] > 0
    # every missing message is either still queued at the broker or held: none lost
    assert step["lost"] == 0
    missing = step["expected"] - step["received"]
    # (the account's buckets: the drain's raw depth may also count a delivery whose ack the
    # cut holds, which RabbitMQ's statistics show unacknowledged; the account does not)
    account = step["account"]
    assert step["unaccounted"] == missing == held["messages"] + account["still_queued"], account
    assert step["account"]["held_by"] == [{"reason": label, "messages": held["messages"]}]
    # the promise is not broken by messages a fault that never ended still holds
    assert step["verdict"]["verdict"] == "kept", step["verdict"]
    assert [f["verdict"] for f in step["faults"]] == ["kept"]
    said = f"{held['messages']:,} held by link fault {label}, still in force"
    assert said in step["verdict"]["note"]
    assert said in proc.stdout  # the run's own line says it
    # the readers accept the step with its new field
    shown = mqlab("show", "--markdown", str(out))
    assert shown.returncode == 0 and said in shown.stdout, shown.stderr


@pytest.mark.broker
def test_the_background_stress_says_what_the_link_fault_held_of_its_own(
    broker: BrokerHandle, tmp_path: Path
) -> None:
    # the background's clients reach the broker through the same faulted link
    name = f"i33c-bg-{uuid.uuid4().hex[:8]}"
    text = PROFILE.format(
        url=broker.url, api=broker.management_url, name=name, action="cut", extra=""
    ).replace(
        f'topic = "{name}"', f'topic = "{name}"\nbackground = {{ pattern = "cast", rate = 50 }}'
    )
    out = tmp_path / "r.json"
    proc = mqlab("run", str(write_profile(tmp_path / "p.toml", text)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    (step,) = strict_json(out)["steps"]
    bg = step["background"]
    assert bg["sent"] > bg["received"] > 0 and bg["drain_end"] == "held", bg
    # what the cut held of the background's is named and counted as held, not lost
    assert bg["held"]["by"] == ["cut node1"] and bg["held"]["messages"] > 0, bg
    assert bg["lost"] == 0 and bg["unaccounted"] == bg["expected"] - bg["received"], bg
    assert "held_by_fault" in bg["flags"]
    assert mqlab("show", str(out)).returncode == 0  # the reader takes the field


@pytest.mark.parametrize(
    ("held", "words"),
    [
        ({"by": "cut node1", "messages": 3}, "steps[5].held.by: expected a list"),
        ({"by": [7], "messages": 3}, "steps[5].held.by[0]: expected text"),
        ({"by": ["cut node1"], "messages": -1}, "steps[5].held.messages: expected a whole"),
        ({"by": ["cut node1"], "messages": 2**60}, "steps[5].held.messages: expected a whole"),
        ({"by": ["cut node1"], "proxy_bytes": 1.5}, "steps[5].held.proxy_bytes: expected"),
        ({"messages": 3}, "steps[5].held.by: missing"),
        ("cut node1", "steps[5].held: expected"),
    ],
)
def test_the_reader_checks_the_held_field(held: object, words: str) -> None:
    doc = fx.schema2_run()
    doc["steps"][5]["held"] = {"by": ["cut node1"], "messages": 3, "proxy_bytes": None}
    read.validate(doc)  # the field as a run writes it
    doc["steps"][5]["held"] = None
    read.validate(doc)  # and as a step without a fault in force
    doc["steps"][5]["held"] = held
    with pytest.raises(read.ResultsShapeError) as refused:
        read.validate(doc)
    assert words in str(refused.value), refused.value


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ('management_url = "ftp://127.0.0.1:15672"', 'expected a URL like "http://'),
        ('management_url = "http://guest:guest@127.0.0.1:15672"', "no user or password here"),
        ('management_url = "http://127.0.0.1:99999"', "bad host or port"),
        ("management_url = 15672", 'expected a URL like "http://'),
        ('managed = true\nmanagement_url = "http://127.0.0.1:15672"', "mqlab's own: remove it"),
    ],
)
def test_a_management_url_that_cannot_be_one_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, words: str
) -> None:
    text = PROFILE.format(url="amqp://127.0.0.1:5672/", api="x", name="n", action="cut", extra="")
    text = text.replace('management_url = "x"', line)
    code = main(["validate", str(write_profile(tmp_path / "p.toml", text))])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "broker.management_url" in err and words in err, err


def test_the_proxy_says_what_it_holds_and_exits_quietly_holding_it() -> None:
    upstream = socket.create_server(("127.0.0.1", 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqlab.faults.proxy", "127.0.0.1", str(upstream.getsockname()[1])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdin is not None

    def ask(cmd: dict[str, object]) -> str:
        assert proc.stdout is not None and proc.stdin is not None
        proc.stdin.write(json.dumps(cmd) + "\n")
        proc.stdin.flush()
        return proc.stdout.readline().strip()

    def held() -> dict[str, object]:
        answer = ask({"action": "held"})
        assert answer.startswith("ok: "), answer
        said: dict[str, object] = json.loads(answer[4:])
        return said

    listen = json.loads(proc.stdout.readline())["port"]
    sender = socket.create_connection(("127.0.0.1", listen), 3)
    receiver, _ = upstream.accept()
    try:
        deadline = time.monotonic() + 5
        while held()["connections"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # the proxy's side of the connection is made just after ours
        assert held() == {"held_bytes": 0, "clear_s": 0.0, "connections": 1, "waiting": 0,
                          "in_force": []}  # fmt: skip
        assert ask({"action": "cut"}).startswith("ok")
        sender.sendall(b"x" * 100_000)
        time.sleep(0.3)
        now = held()
        # all of it is held, read or waiting unread on the proxy's socket; a cut never clears
        assert now["held_bytes"] == 100_000 and now["clear_s"] is None, now
        assert now["in_force"] == ["cut"]
        assert ask({"action": "restore"}).startswith("ok")
        got = 0
        receiver.settimeout(5)
        while got < 100_000:  # the restore lets it through
            got += len(receiver.recv(1 << 20))
        assert held()["held_bytes"] == 0
        assert ask({"action": "delay", "ms": 60_000}).startswith("ok")
        sender.sendall(b"y" * 1000)
        time.sleep(0.3)
        now = held()
        assert now["held_bytes"] == 1000 and now["in_force"] == ["delay"], now
        assert 55 < float(str(now["clear_s"])) <= 60, now  # due a minute after it was read
        _, err = proc.communicate("", timeout=10)  # stdin closed: it exits, still holding
    finally:
        for sock in (sender, receiver, upstream):
            sock.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and err == "", err
