"""Packet loss without netem (issue 36, part 1): namespaces, a veth link, nftables drops.

The namespace builder on its own (built, reachable, torn down by prefix, also after a
failure), then a real run: the kombu-style driver's calls cross a link that drops 5 % of
its packets; TCP retransmits, the latency grows a tail, nothing is lost, and no namespace
is left afterwards.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqlab import netns
from mqlab.netns import NetnsError, Network

from .conftest import BrokerHandle
from .helpers import mqlab, write_profile

#: every name these tests make starts with it (the machine is shared)
BASE = "mq36"


def _ours() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return [w for w in (out + links).replace(":", " ").split() if w.startswith(BASE)]


@pytest.fixture
def network() -> Iterator[Network]:
    net = Network.create(f"{BASE}t", ["a", "b"])
    try:
        yield net
    finally:
        net.destroy()


def test_hosts_reach_each_other_and_the_root_namespace_and_all_is_removed(
    network: Network,
) -> None:
    listener = socket.create_server((network.root_address, 0))
    port = listener.getsockname()[1]
    accepted = threading.Thread(target=lambda: listener.accept()[0].close())
    accepted.start()
    probe = "import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 3)"
    network.run("a", ["python3", "-c", probe, network.root_address, str(port)])
    accepted.join(5)
    listener.close()
    # the hosts see each other, not this namespace's other addresses
    assert network.run("b", ["ip", "-4", "-o", "addr"]).stdout.count("inet ") == 2  # lo + link
    assert network.address("a") != network.address("b")
    network.destroy()
    assert _ours() == []


def test_a_build_that_fails_half_way_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    real = netns._ip

    def failing(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        if args[:3] == ("netns", "add", f"{BASE}f-b"):
            raise NetnsError("ip netns add: refused (as the test asks)")
        return real(*args, check=check)

    monkeypatch.setattr(netns, "_ip", failing)
    with pytest.raises(NetnsError):
        Network.create(f"{BASE}f", ["a", "b"])
    monkeypatch.undo()
    assert _ours() == []


def test_a_dead_run_s_namespaces_are_swept_by_its_pid() -> None:
    net = Network.create(netns.prefix_for(BASE, _dead_pid()), ["x"])
    assert (
        net.namespace("x")
        in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    )
    assert netns.sweep(BASE) == [net.prefix]
    assert _ours() == []


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


PROFILE = """
[run]
name = "loss"
duration = "10s"
warmup = "1s"
drain = "10s"
[broker]
url = "{url}"
[drivers.kombu]
plugin = "kombu"
retry = 3
[[scenario]]
name = "calm"
pattern = "call"
concurrency = [4]
[[scenario]]
name = "lossy"
pattern = "call"
concurrency = [4]
[[scenario.event]]
at = "0s"
action = "loss"
percent = 5
"""


@pytest.mark.broker
def test_5_percent_loss_retransmits_grows_a_tail_and_loses_nothing(
    broker: BrokerHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "r.json"
    profile = write_profile(tmp_path / "p.toml", PROFILE.format(url=broker.url))
    monkeypatch.setenv("MQLAB_NETNS_BASE", BASE)
    proc = mqlab("run", str(profile), "--quiet", "-o", str(out), timeout=180)
    assert proc.returncode == 0, proc.stderr
    calm, lossy = json.loads(out.read_text())["steps"]
    assert "link" not in calm  # no namespace, no counters: it ran on loopback
    link = lossy["link"]
    assert link["segments_out"] > 1000
    # the workers' own kernel resent what the link dropped (5 % of their segments, about)
    assert link["retransmitted_segments"] > 0.01 * link["segments_out"]
    # TCP hides the loss: every call came back, none twice
    assert lossy["round_trip"] == lossy["sent"] > 0
    assert (lossy["lost"], lossy["duplicates"]) == (0, 0)
    assert lossy["errors"] == {}
    # a dropped segment waits for its retransmission: a tail the calm step does not have
    assert lossy["latency"]["round_trip"]["max"] > 2 * calm["latency"]["round_trip"]["p99"]
    assert _ours() == []


def test_the_proxy_exits_quietly_with_connections_still_open() -> None:
    # a lossy link can leave a connection open when the proxy is told to go (a FIN lost,
    # not yet retransmitted); a cut holds new ones: neither may print a traceback
    upstream = socket.create_server(("127.0.0.1", 0))
    port = upstream.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqlab.faults.proxy", "127.0.0.1", str(port)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdin is not None
    listen = json.loads(proc.stdout.readline())["port"]
    open_one = socket.create_connection(("127.0.0.1", listen), 3)
    upstream.accept()
    proc.stdin.write('{"action": "delay", "ms": 500}\n{"action": "cut"}\n')
    proc.stdin.flush()
    for _ in range(2):
        assert proc.stdout.readline().startswith("ok")
    held = socket.create_connection(("127.0.0.1", listen), 3)
    _, err = proc.communicate("", timeout=10)  # stdin closed: the proxy exits
    for sock in (open_one, held, upstream):
        sock.close()
    assert proc.returncode == 0 and "Traceback" not in err, err


def test_a_delayed_link_keeps_a_window_in_flight_not_one_read_per_delay() -> None:
    # seed 004's stress beside a 200 ms WAN: 1,000 notifications/s of 2.5 KB cross the
    # proxy; one read per delay (64 KiB per 300 ms here) would need 10 s for these 2 MiB
    upstream = socket.create_server(("127.0.0.1", 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqlab.faults.proxy", "127.0.0.1", str(upstream.getsockname()[1])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdin is not None
    listen = json.loads(proc.stdout.readline())["port"]
    proc.stdin.write('{"action": "delay", "ms": 300}\n')
    proc.stdin.flush()
    assert proc.stdout.readline().startswith("ok")
    sender = socket.create_connection(("127.0.0.1", listen), 3)
    receiver, _ = upstream.accept()
    total = 2 * 2**20
    started = time.monotonic()
    threading.Thread(target=sender.sendall, args=(b"x" * total,), daemon=True).start()
    got = 0
    receiver.settimeout(15)
    while got < total:
        got += len(receiver.recv(2**20))
    took = time.monotonic() - started
    proc.communicate("", timeout=10)
    for sock in (sender, receiver, upstream):
        sock.close()
    assert 0.3 <= took < 3.0, f"2 MiB through a 300 ms delay took {took:.1f} s"
