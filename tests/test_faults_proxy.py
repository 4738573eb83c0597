"""The TCP fault proxy between a real pika connection and a real RabbitMQ node (issue 13):
delay, cut (no RST: only the heartbeat can tell), reset (an RST), restore, and its CPU."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pika
import pika.exceptions
import pytest

from mqlab.faults.link import via
from mqlab.sdk.urls import host_port
from tests.conftest import BrokerHandle

pytestmark = pytest.mark.broker


class Proxy:
    def __init__(self, url: str) -> None:
        host, port = host_port(url)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mqlab.faults.proxy", host, str(port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        self.url = via(url, json.loads(self.proc.stdout.readline())["port"])

    def command(self, **cmd: object) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # the proxy exits when its stdin closes
        self.proc.wait(5)


@pytest.fixture
def proxy(broker: BrokerHandle) -> Iterator[Proxy]:
    p = Proxy(broker.url)
    try:
        yield p
    finally:
        p.stop()


def _connect(url: str, heartbeat: int = 0) -> pika.BlockingConnection:
    params = pika.URLParameters(url)
    params.heartbeat = heartbeat
    return pika.BlockingConnection(params)


def _until_closed(conn: pika.BlockingConnection, limit: float) -> tuple[Exception, float]:
    """Let the connection process its frames until it fails; the failure and when."""
    began = time.monotonic()
    try:
        while time.monotonic() - began < limit:
            conn.process_data_events(0.1)
    except pika.exceptions.AMQPError as exc:
        return exc, time.monotonic() - began
    finally:
        if conn.is_open:
            conn.close()
    pytest.fail(f"the connection was still open after {limit:g} s", pytrace=False)


def _declare_ms(ch: pika.adapters.blocking_connection.BlockingChannel) -> float:
    began = time.monotonic()
    ch.queue_declare("", exclusive=True)
    return (time.monotonic() - began) * 1000


def test_delay_holds_every_chunk_and_restore_lifts_it(proxy: Proxy) -> None:
    conn = _connect(proxy.url)
    try:
        ch = conn.channel()
        plain = min(_declare_ms(ch) for _ in range(3))
        assert proxy.command(action="delay", ms=150, jitter_ms=0).startswith("ok")
        slowed = _declare_ms(ch)  # a request and its answer: two crossings
        assert proxy.command(action="restore").startswith("ok")
        restored = min(_declare_ms(ch) for _ in range(3))
    finally:
        conn.close()
    assert slowed >= 290, (plain, slowed)
    assert restored < 150, (plain, restored)


def test_a_cut_sends_no_rst_and_pika_s_heartbeat_detects_it(proxy: Proxy) -> None:
    heartbeat = 1
    conn = _connect(proxy.url, heartbeat)
    conn.channel()
    assert proxy.command(action="cut").startswith("ok")
    failure, took = _until_closed(conn, 60)
    # no RST, no FIN reached pika: only its heartbeat checker could end the connection.
    # pika checks every heartbeat + 5 s and gives up after one silent check interval,
    # so a cut is seen between one and two of those intervals after it began
    bound = 2 * (heartbeat + 5)
    print(f"\ncut detected by pika's heartbeat ({heartbeat} s) after {took:.2f} s "
          f"(pika's bound: {bound} s)")  # fmt: skip
    assert isinstance(failure, pika.exceptions.AMQPHeartbeatTimeout), repr(failure)
    assert took <= bound + 2


def test_reset_sends_an_rst_the_client_sees_at_once(proxy: Proxy) -> None:
    conn = _connect(proxy.url, heartbeat=60)
    conn.channel()
    assert proxy.command(action="reset") == "ok: 1 connection(s) reset"
    failure, took = _until_closed(conn, 10)
    assert isinstance(failure, pika.exceptions.StreamLostError), repr(failure)
    assert "reset" in str(failure).lower(), failure
    assert took < 2.0
    # the proxy forwards new connections after a reset
    _connect(proxy.url).close()


def test_a_connection_made_during_a_cut_is_held_until_the_restore(proxy: Proxy) -> None:
    proxy.command(action="cut")
    host, port = host_port(proxy.url)
    with socket.create_connection((host, port), timeout=1.5) as sock:
        sock.sendall(b"AMQP\x00\x00\x09\x01")  # the AMQP 0-9-1 protocol header
        with pytest.raises(TimeoutError):
            sock.recv(7)  # held: neither an answer nor a close
        proxy.command(action="restore")
        sock.settimeout(5)
        assert sock.recv(7)[:1] == b"\x01"  # then connection.start, on the same socket


def test_bandwidth_limits_each_direction(proxy: Proxy) -> None:
    conn = _connect(proxy.url)
    try:
        ch = conn.channel()
        assert proxy.command(action="bandwidth", kbps=160).startswith("ok")  # 20 kB/s
        began = time.monotonic()
        ch.basic_publish("", "nobody", b"x" * 40_000)  # 40 kB: about 2 s at that rate
        _declare_ms(ch)  # waits behind the publish on the same connection
        took = time.monotonic() - began
    finally:
        proxy.command(action="restore")
        conn.close()
    assert took >= 1.5, took
