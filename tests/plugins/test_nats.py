"""The nats plugin against a private nats-server that mqlab starts (never skipped)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from mqlab_nats.transport import NatsTransport
from nats.aio.client import Client

from mqlab import registry
from mqlab.errors import ConnectionLost, DriverError, TransportError, Undeliverable
from mqlab.servers import managed
from mqlab.servers.daemons import NatsServer, terminate
from mqlab.servers.handle import ServerHandle
from mqlab.transport import Target, Transport
from tests.test_faults_proxy import Proxy


def _transport(server: ServerHandle, worker: str, **options: object) -> Transport:
    return registry.get("nats").build(server.urls, options, worker)


def _nc(transport: Transport) -> Client:
    """The started transport's nats-py client, to see what state nats-py says it is in."""
    assert isinstance(transport, NatsTransport) and transport.nc is not None
    return transport.nc


def _restart(handle: ServerHandle) -> subprocess.Popen[bytes]:
    """The managed nats-server again, after it was killed: same config, so the same port (the
    clients reconnect to it) and JetStream store. The caller stops it (``terminate``)."""
    with (handle.state_dir / "server.log").open("ab") as log:
        return subprocess.Popen(
            [NatsServer.binary, "-c", str(handle.state_dir / "nats.conf")],
            cwd=handle.state_dir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _run_restarting(
    tmp_path: Path,
    check: Callable[[ServerHandle], Coroutine[Any, Any, None]],
    restarted: list[subprocess.Popen[bytes]],
) -> None:
    """``check`` on a private nats-server; the servers it put in ``restarted``, stopped after."""
    try:
        with managed.managed(["nats"], tmp_path) as handles:
            asyncio.run(check(handles["nats"]))
    finally:
        for proc in restarted:
            assert terminate(proc), f"nats-server {proc.pid} did not exit after SIGKILL"


async def _freeze(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until every thread of it has stopped: the signal only asks,
    and a thread of nats-server's still running could answer one more PING (seen once)."""
    os.kill(pid, signal.SIGSTOP)
    tasks = Path(f"/proc/{pid}/task")

    def stopped() -> bool:
        states = [(t / "stat").read_text().rpartition(")")[2].split()[0] for t in tasks.iterdir()]
        return all(state == "T" for state in states)

    await _until(f"nats-server {pid} stopped", stopped, 5.0)


async def _until(what: str, done: Callable[[], bool], within: float) -> None:
    for _ in range(int(within / 0.05)):
        if done():
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"{what}: not within {within}s")


def test_durable_notifications_wait_in_jetstream_for_a_listener_that_was_away(
    nats_server: ServerHandle,
) -> None:
    """A pool's durable consumer keeps its place: what was published while its only listener
    was down arrives when one comes back, and what was acked before does not come again."""
    tag = uuid.uuid4().hex[:8]
    target = Target(f"dur-{tag}", "events", durable=True)
    before = [b"before%d" % i for i in range(10)]
    away = [b"away%d" % i for i in range(10)]

    async def until(got: list[bytes], want: int) -> None:
        for _ in range(400):  # up to 20 s: a loaded CI machine is slow to deliver
            if len(got) >= want:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # a redelivery would show as a duplicate

    async def check() -> None:
        first: list[bytes] = []
        async with _transport(nats_server, f"{tag}-c") as client:
            # ack_wait 2 s: a message JetStream pushed while the first listener's interest was
            # still being withdrawn is redelivered after ack_wait (at least once), within the wait
            async with _transport(nats_server, f"{tag}-l1", ack_wait=2) as listener:
                await listener.serve_notifications(target, "audit", first.append)
                for body in before:
                    await client.notify(target, body)
                await until(first, len(before))
            for body in away:
                await client.notify(target, body)
        later: list[bytes] = []
        async with _transport(nats_server, f"{tag}-l2", ack_wait=2) as listener:
            await listener.serve_notifications(target, "audit", later.append)
            await until(later, len(away))
        assert sorted(first) == sorted(before)
        assert sorted(later) == sorted(away)

    asyncio.run(check())


def test_a_cast_to_nobody_is_sent_without_mandatory_and_refused_with_it(
    nats_server: ServerHandle,
) -> None:
    target = Target(f"nobody-{uuid.uuid4().hex[:8]}", "topic")

    async def check() -> None:
        async with _transport(nats_server, "plain") as plain:
            await plain.cast(target, b"lost")  # core NATS: fire and forget
        async with _transport(nats_server, "mand", mandatory=True) as mandatory:
            with pytest.raises(Undeliverable, match="no responders"):
                await mandatory.cast(target, b"refused")

    asyncio.run(check())


def test_a_slow_consumer_s_dropped_messages_are_reported(nats_server: ServerHandle) -> None:
    """Core NATS drops what a subscription cannot buffer; each drop is an error of the step,
    so the losses the ledger counts come with their reason."""
    tag = uuid.uuid4().hex[:8]
    target = Target(f"slow-{tag}", "t")
    got: list[bytes] = []
    reported: list[TransportError] = []

    def slow(body: bytes) -> None:
        time.sleep(0.002)  # blocks the loop: nats-py reads ahead into the pending buffer
        got.append(body)

    async def check() -> None:
        async with (
            _transport(nats_server, f"{tag}-s", pending_messages=5) as server,
            _transport(nats_server, f"{tag}-c") as client,
        ):
            server.on_report = reported.append  # what a worker counts in the step's errors
            await server.serve_rpc(target.to_server("s1"), slow)
            for i in range(2000):
                await client.cast(target, b"%d" % i)
            for _ in range(200):
                if len(got) + len(reported) >= 2000:
                    break
                await asyncio.sleep(0.05)

    asyncio.run(check())
    assert reported, "nothing was dropped: the consumer was not slow enough"
    assert len(got) + len(reported) == 2000  # every cast either handled or reported dropped
    assert all(isinstance(e, DriverError) for e in reported)
    assert "slow consumer" in str(reported[0]) and "pending_messages = 5" in str(reported[0])


def test_a_lost_connection_is_reported_and_the_client_carries_on(
    nats_server: ServerHandle,
) -> None:
    """nats-py reconnects by itself; the step must still hear that the connection dropped."""
    tag = uuid.uuid4().hex[:8]
    target = Target(f"lost-{tag}", "t")
    got: list[bytes] = []
    reported: list[TransportError] = []
    proxy = Proxy(nats_server.urls[0])

    async def check() -> None:
        async with (
            _transport(nats_server, f"{tag}-s") as server,
            registry.get("nats").build((proxy.url,), {}, f"{tag}-c") as client,
        ):
            client.on_report = reported.append  # what a worker counts in the step's errors
            await server.serve_rpc(target.to_server("s1"), got.append)
            await client.cast(target, b"before")
            for _ in range(100):
                if got:
                    break
                await asyncio.sleep(0.05)
            proxy.command(action="reset")  # an RST on the client's connection
            for _ in range(100):
                if reported:
                    break
                await asyncio.sleep(0.05)
            for _ in range(100):  # reconnected through the proxy: casts arrive again
                await client.cast(target, b"after")
                await asyncio.sleep(0.05)
                if b"after" in got:
                    break

    try:
        asyncio.run(check())
    finally:
        proxy.stop()
    assert b"before" in got and b"after" in got
    [lost] = reported
    assert isinstance(lost, ConnectionLost), lost
    assert "NATS connection to nats://127.0.0.1:" in str(lost), lost
    assert str(lost).endswith("lost; reconnecting") or " lost: " in str(lost), lost


# -- a server that dies for good: errors within a bounded time, never a hang -------------------


async def _bounded(what: str, send: Callable[[], Awaitable[object]], within: float) -> object:
    """What ``send`` returned or raised; a test failure, not a hang, if it takes longer."""
    try:
        async with asyncio.timeout(within):
            return await send()
    except TimeoutError as exc:
        if isinstance(exc, TransportError):  # CallTimeout is a TimeoutError too
            return exc
        pytest.fail(f"{what} still waiting {within}s after the NATS server died")
    except TransportError as exc:
        return exc


def test_senders_waiting_on_a_full_buffer_return_when_the_server_dies(tmp_path: Path) -> None:
    """Casts past nats-py's pending buffer wait for its flusher; a server that dies while they
    wait must not leave them waiting for good (nats-py never resolves those waits once its
    flusher is gone): each sender gets ConnectionLost within a bounded time."""
    target = Target(f"dies-{uuid.uuid4().hex[:8]}", "t")
    body = b"x" * (1024 * 1024)  # 9 casts fill nats-py's 8 MB buffer: the flusher sets the pace
    ended: list[BaseException] = []

    async def check(handle: ServerHandle) -> None:
        async with _transport(handle, "s") as server, _transport(handle, "c") as client:
            await server.serve_rpc(target, lambda _body: None)

            async def sender() -> None:
                try:
                    while True:
                        await client.cast(target, body)
                except Exception as exc:  # noqa: BLE001 - the test checks what it was
                    ended.append(exc)

            tasks = [asyncio.create_task(sender()) for _ in range(4)]
            await asyncio.sleep(0.5)
            # frozen, then gone: the client's socket is full, its senders wait on the flusher
            await _freeze(handle.pids[0])
            await asyncio.sleep(1.0)
            os.kill(handle.pids[0], signal.SIGKILL)
            _, stuck = await asyncio.wait(tasks, timeout=10.0)
            if stuck:  # close the client so they can end, then fail
                await client.aclose()
                for task in stuck:
                    task.cancel()
                await asyncio.wait(stuck, timeout=5.0)
            assert not stuck, f"{len(stuck)} of 4 senders still waiting 10 s after the server died"
            await _bounded("aclose", client.aclose, 5.0)

    with managed.managed(["nats"], tmp_path) as handles:
        asyncio.run(check(handles["nats"]))
    assert len(ended) == 4
    assert all(isinstance(e, ConnectionLost) for e in ended), ended


def test_a_server_gone_for_good_gives_errors_not_hangs(tmp_path: Path) -> None:
    """After the server dies: while nats-py reconnects, every send returns or fails within a
    bounded time (casts are buffered, calls and mandatory casts time out); once it gives up,
    every send fails at once with ConnectionLost; closing is prompt."""
    tag = uuid.uuid4().hex[:8]
    target = Target(f"gone-{tag}", "t")
    event = Target(f"gone-{tag}", "events")
    durable = Target(f"gone-{tag}", "kept", durable=True)
    quick = {"reconnect_attempts": 4}  # nats-py gives up after ~2 s, not 60 tries
    reported: list[TransportError] = []

    async def check(handle: ServerHandle) -> None:
        async with (
            _transport(handle, f"{tag}-s") as server,
            _transport(handle, f"{tag}-c", **quick) as plain,
            _transport(handle, f"{tag}-f", flush=True, **quick) as flushing,
            _transport(handle, f"{tag}-m", mandatory=True, cast_timeout=1, **quick) as mandatory,
        ):
            plain.on_report = reported.append
            await server.serve_rpc(target, lambda _body: b"ok")
            await server.serve_notifications(durable, "pool", lambda _body: None)
            assert await plain.call(target, b"up?", 5.0) == b"ok"
            await plain.notify(durable, b"up")  # its stream exists: the publish waits for an ack
            os.kill(handle.pids[0], signal.SIGKILL)
            sends: dict[str, Callable[[], Awaitable[object]]] = {
                "cast": lambda: plain.cast(target, b"c"),
                "cast (flush = true)": lambda: flushing.cast(target, b"f"),
                "notify (flush = true)": lambda: flushing.notify(event, b"f"),
                "cast (mandatory = true)": lambda: mandatory.cast(target, b"m"),
                "call": lambda: plain.call(target, b"q", 1.0),
                "notify": lambda: plain.notify(event, b"n"),
                "durable notify": lambda: plain.notify(durable, b"d"),
            }
            # while nats-py reconnects: buffered, timed out or refused, but each one ends.
            # A flush whose PING went out just before the drop waits for nats-py's flush
            # timeout (10 s) for a PONG that never comes: bounded, hence 15 s here
            while_down = await asyncio.gather(
                *(_bounded(what, send, 15.0) for what, send in sends.items())
            )
            assert all(r is None or isinstance(r, TransportError) for r in while_down), while_down
            for _ in range(200):  # up to 10 s for nats-py to give up
                if isinstance(await _bounded("cast", sends["cast"], 10.0), ConnectionLost):
                    break
                await asyncio.sleep(0.05)
            for what, send in sends.items():  # gone for good: every send says so at once
                outcome = await _bounded(what, send, 1.0)
                assert isinstance(outcome, ConnectionLost), (what, outcome)
            for transport in (plain, flushing, mandatory, server):
                await _bounded("aclose", transport.aclose, 5.0)

    with managed.managed(["nats"], tmp_path) as handles:
        asyncio.run(check(handles["nats"]))
    # nats-py calls its disconnected callback again when it gives up (its close()): still
    # one lost connection, one report
    assert len(reported) == 1 and isinstance(reported[0], ConnectionLost), reported


# -- lost connections: counted once each; flush = true never claims what the server lacks -------


def test_each_lost_connection_is_one_report_with_busy_senders_and_a_restarted_server(
    tmp_path: Path,
) -> None:
    """Under load both nats-py's reader and its writer meet a dropped connection (each calls
    its reconnect path); the step must still count one ConnectionLost per lost connection.
    The server is killed under four busy senders and restarted on its port, twice: each drop
    is one report, and the second drop, after nats-py reconnected, is a report of its own."""
    target = Target(f"once-{uuid.uuid4().hex[:8]}", "t")
    body = b"x" * (64 * 1024)  # 128 casts fill nats-py's 8 MB buffer: the writer stays busy
    reported: list[TransportError] = []
    restarted: list[subprocess.Popen[bytes]] = []

    async def check(handle: ServerHandle) -> None:
        async with _transport(handle, "s") as server, _transport(handle, "c") as client:
            client.on_report = reported.append
            await server.serve_rpc(target, lambda _body: None)
            nc, stop = _nc(client), asyncio.Event()

            async def sender() -> None:
                while not stop.is_set():
                    try:
                        await client.cast(target, body)
                    except TransportError:
                        await asyncio.sleep(0.01)

            tasks = [asyncio.create_task(sender()) for _ in range(4)]
            try:
                for drop in (1, 2):
                    await asyncio.sleep(0.5)  # the senders keep the writer busy
                    os.kill(restarted[-1].pid if restarted else handle.pids[0], signal.SIGKILL)
                    await _until("nats-py reconnecting", lambda: not nc.is_connected, 5.0)
                    await asyncio.sleep(1.0)  # its reconnect attempts are refused meanwhile
                    restarted.append(_restart(handle))
                    await _until("nats-py reconnected", lambda: nc.is_connected, 20.0)
                    await asyncio.sleep(1.0)  # a second report for the same drop comes by now
                    assert len(reported) == drop, [str(e) for e in reported]
            finally:
                stop.set()
                await asyncio.wait(tasks, timeout=10.0)

    _run_restarting(tmp_path, check, restarted)
    assert all(isinstance(e, ConnectionLost) for e in reported), reported
    for lost in reported:
        assert "NATS connection to nats://127.0.0.1:" in str(lost), lost
        assert str(lost).endswith("; reconnecting"), lost


def test_a_flush_send_while_nats_py_reconnects_fails_instead_of_passing_for_sent(
    tmp_path: Path,
) -> None:
    """While nats-py reconnects, its flush returns at once without asking the server (its
    reader and writer tasks are gone) and a publish only waits in its buffer. A flush = true
    cast or notify must not count as sent then: each fails at once with ConnectionLost, and
    is not left in the buffer to arrive after the reconnection."""
    tag = uuid.uuid4().hex[:8]
    target, event = Target(f"flushdown-{tag}", "t"), Target(f"flushdown-{tag}", "events")
    reported: list[TransportError] = []

    async def check(handle: ServerHandle) -> None:
        async with _transport(handle, "f", flush=True) as client:
            client.on_report = reported.append
            await client.cast(target, b"up")
            os.kill(handle.pids[0], signal.SIGKILL)
            # reported once nats-py's reconnect task has closed the socket and ended its tasks
            await _until("the lost connection's report", lambda: bool(reported), 5.0)
            nc = _nc(client)
            assert nc.is_reconnecting
            buffered = nc.pending_data_size
            sends: dict[str, Callable[[], Awaitable[object]]] = {
                "cast": lambda: client.cast(target, b"c"),
                "notify": lambda: client.notify(event, b"n"),
            }
            for what, send in sends.items():
                outcome = await _bounded(what, send, 2.0)
                assert isinstance(outcome, ConnectionLost), (what, outcome)
                assert "not sent (flush = true)" in str(outcome), outcome
            assert nc.pending_data_size == buffered  # nothing buffered to go out later
            await _bounded("aclose", client.aclose, 5.0)

    with managed.managed(["nats"], tmp_path) as handles:
        asyncio.run(check(handles["nats"]))


def test_a_flush_whose_pong_a_lost_connection_took_is_connection_lost(tmp_path: Path) -> None:
    """A flush = true send whose PING went out just before the connection dropped never gets
    its PONG: nats-py's flush times out after 10 s, by then reconnected to the restarted
    server. The plugin saw the connection drop meanwhile: ConnectionLost, not a DriverError
    about a flush timeout."""
    target = Target(f"flushcut-{uuid.uuid4().hex[:8]}", "t")
    restarted: list[subprocess.Popen[bytes]] = []

    async def check(handle: ServerHandle) -> None:
        async with _transport(handle, "f", flush=True) as client:
            await client.cast(target, b"up")
            await _freeze(handle.pids[0])  # takes the PING, never answers it
            send = asyncio.create_task(client.cast(target, b"cut"))
            await asyncio.sleep(0.5)
            assert not send.done(), send
            os.kill(handle.pids[0], signal.SIGKILL)
            await _until("nats-py reconnecting", lambda: not _nc(client).is_connected, 5.0)
            restarted.append(_restart(handle))
            await _until("nats-py reconnected", lambda: _nc(client).is_connected, 20.0)
            outcome = await _bounded("the cut flush", lambda: send, 15.0)
            assert isinstance(outcome, ConnectionLost), outcome
            assert "before the server's PONG" in str(outcome), outcome
            await client.cast(target, b"back")  # a round trip again: the server answers

    _run_restarting(tmp_path, check, restarted)
