"""A worker: one OS process running the servers and/or clients of one step.

Started by the runner as ``python -m mqlab.worker.process --control HOST:PORT --name N``
on its own uvloop loop, its key in its environment (:data:`~mqlab.worker.protocol.TOKEN_ENV`).
It connects back with that key, receives its spec, starts its
transport, reports ready, runs when told, sends a snapshot every second, and
exits when the controller says finish or goes away. It never draws on screen.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import sys

from mqlab import netns, registry
from mqlab.codec import Codec
from mqlab.config.plan import ClientRole, WorkerSpec
from mqlab.config.sizes import SizeSampler, SizeSpec
from mqlab.errors import MqlabError, TransportError
from mqlab.eventloop import run
from mqlab.transport import CLOSE_LIMIT, Target, Transport
from mqlab.worker import clock, protocol
from mqlab.worker.recorder import MARK_NS, Recorder
from mqlab.worker.workload import ClientLoad, server_handler

_NS = 1_000_000_000


def _error(exc: BaseException) -> protocol.Error:
    kind = exc.kind if isinstance(exc, TransportError) else type(exc).__name__
    return protocol.Error(kind, str(exc) or kind)


def _scratch(step_dir: str) -> str | None:
    """The step's scratch directory for plugins, inside the step's own mkdtemp directory."""
    if not step_dir:
        return None
    path = os.path.join(step_dir, "scratch")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


async def _open(spec: WorkerSpec, rec: Recorder, dual: bool = False) -> Transport:
    """One started transport of the worker's driver; ``dual``: the old driver's."""
    name = spec.dual_plugin if dual else spec.plugin
    plugin = registry.get(name)
    if spec.pattern not in plugin.cls.patterns():
        raise MqlabError(f"plugin {name!r} does not support the {spec.pattern} pattern")
    transport = plugin.build(
        spec.dual_urls if dual else spec.urls,
        spec.dual_options if dual else spec.options,
        spec.worker,
        _scratch(spec.ledger_dir),
    )
    # what the driver reports from the background (a dropped connection) is counted
    # as an error of the step, like one a send raised, but fails no message
    transport.on_report = lambda exc: rec.on_error(exc.kind, None, str(exc))
    # and what happened to its connections is an event on the step's timeline
    transport.on_notice = lambda kind, cause, conn: rec.spontaneous.add(
        kind, cause, conn, now=clock.now()
    )
    await transport.start()
    return transport


async def _serve(
    spec: WorkerSpec, rec: Recorder, codec: Codec, transports: list[Transport]
) -> None:
    """The worker's servers listening, ``servers[j::n]`` on the j-th of n transports."""
    topics = {srv.topic for srv in spec.servers}
    if len(topics) == 1:
        rec.only_topic = next(iter(topics))
    for i, srv in enumerate(spec.servers):
        transport = transports[i % len(transports)]
        target = Target(
            spec.exchange, srv.topic, srv.name, False, spec.durable, queue_type=spec.queue_type
        )
        many = srv.topic if len(topics) > 1 else ""
        handler = server_handler(codec, rec, srv.group, spec.pattern == "call", many)
        if spec.pattern == "notify":
            await transport.serve_notifications(target, srv.pool, handler)
        else:
            await transport.serve_rpc(target, handler)


async def _start(
    spec: WorkerSpec, rec: Recorder, codec: Codec, dual: bool = False
) -> list[Transport]:
    """The worker's transports (``connections`` of them, one for the old driver), its
    servers listening unless the spec holds them (a pre-filled step)."""
    transports: list[Transport] = []
    try:
        for _ in range(1 if dual else max(1, spec.connections)):
            transports.append(await _open(spec, rec, dual))
        if not spec.hold or dual:
            await _serve(spec, rec, codec, transports)
    except BaseException:
        for transport in transports:
            await _close(transport)
        raise
    return transports


async def _consume(
    spec: WorkerSpec, rec: Recorder, codec: Codec, transports: list[Transport]
) -> None:
    """A held worker's servers start listening; a refusal is the step's error, not the end
    of the worker (its figures still count)."""
    try:
        await _serve(spec, rec, codec, transports)
    except Exception as exc:  # noqa: BLE001 - counted and shown, as a send's error is
        frame = _error(exc)
        rec.on_error(frame.kind, None, frame.message)


async def _close(transport: Transport) -> None:
    with contextlib.suppress(Exception, asyncio.TimeoutError):
        await asyncio.wait_for(transport.aclose(), CLOSE_LIMIT)


def _client_targets(spec: WorkerSpec, role: ClientRole) -> list[Target]:
    if spec.targeted and role.pairs:
        return [
            Target(spec.exchange, t, s, False, spec.durable, queue_type=spec.queue_type)
            for t, s in role.pairs
        ]
    return [
        Target(spec.exchange, t, None, spec.fanout, spec.durable, queue_type=spec.queue_type)
        for t in role.topics
    ]


async def serve(
    host: str, port: int, name: str, sock: socket.socket | None = None, token: str = ""
) -> int:
    if sock is not None:  # connected before the worker moved into its network namespace
        reader, writer = await asyncio.open_connection(sock=sock)
    else:
        reader, writer = await asyncio.open_connection(host, port)
    await protocol.send(writer, protocol.Hello(name, os.getpid(), token))
    try:
        first = await protocol.recv(reader)
    except asyncio.IncompleteReadError:
        raise protocol.FrameError(
            "the controller closed the control channel without a spec: it admits only the "
            f"worker it started, with the key it gave it in {protocol.TOKEN_ENV}"
        ) from None
    if not isinstance(first, protocol.Spec):
        raise protocol.FrameError(f"control frame {first.TYPE!r} came first, not the spec")
    spec = first.spec
    clock.set_offset(spec.clock_offset_ns)  # before any time is read: go, stamps, receipts
    rec = Recorder(spec.ledger_dir, spec.worker)
    codec = Codec(spec.serializer, spec.envelope)
    old: Transport | None = None
    try:
        transports = await _start(spec, rec, codec)
        transport = transports[0]
        if spec.dual_plugin:
            # the same servers, recorder and ledger on the old driver's transport too:
            # each client is answered on the transport its request came in on, and a
            # message counts once whichever transport delivered it
            try:
                old = (await _start(spec, rec, codec, dual=True))[0]
            except BaseException:
                for each in transports:
                    await _close(each)
                raise
    except Exception as exc:  # noqa: BLE001 - reported as one line, never a traceback
        await protocol.send(writer, _error(exc))
        writer.close()
        return 1
    await protocol.send(writer, protocol.Ready())
    loads = [
        ClientLoad(
            transport,
            spec.pattern,
            _client_targets(spec, role),
            codec,
            SizeSampler(SizeSpec("", spec.size_bins), spec.seed + role.client_id),
            rec,
            role.client_id,
            spec.timeout,
        )
        for role in spec.clients
    ]
    try:
        go = await protocol.recv(reader)
        if not isinstance(go, protocol.Go):
            return 0
        rec.open(go.t0, go.window_start, go.window_end)
        async with asyncio.TaskGroup() as tg:
            runs = [
                tg.create_task(
                    load.closed_loop(role.concurrency, go.start, go.window_end, role.batch)
                    if role.concurrency
                    else load.open_loop(role.rate, go.start, go.window_end, go.schedule_from)
                )
                for load, role in zip(loads, spec.clients, strict=True)
            ]
            ticker = tg.create_task(_snapshots(writer, rec))
            consuming: asyncio.Task[None] | None = None  # a held worker's servers, once told
            if runs:
                tg.create_task(_report_done(writer, runs))
            while True:
                match await protocol.recv(reader):
                    case protocol.Stop():
                        for load in loads:
                            load.stop.set()
                    case protocol.Snap():
                        await protocol.send(writer, protocol.Snapshot(rec.figures()))
                    case protocol.Finish():
                        break
                    case protocol.Consume() if spec.hold and consuming is None:
                        consuming = tg.create_task(_consume(spec, rec, codec, transports))
                    case protocol.CloseOld() if old is not None:
                        # the last old-driver client has moved: stop listening on its transport
                        await _close(old)
                        old = None
                        await protocol.send(writer, protocol.ClosedOld())
                    case protocol.Retire():
                        # a graceful stop, as a service restart does it: stop sending and
                        # consuming, let what is in hand finish, close, then report
                        for load in loads:
                            load.stop.set()
                        await asyncio.gather(*runs, return_exceptions=True)
                        for each in transports:
                            await _close(each)
                        if old is not None:
                            await _close(old)
                            old = None
                        break
            ticker.cancel()
            for t in (*runs, *([consuming] if consuming else [])):
                t.cancel()
        await protocol.send(writer, protocol.Final(rec.figures()))
    except (asyncio.IncompleteReadError, ConnectionError):
        pass  # the controller went away: nothing to report to, just clean up
    finally:
        for each in transports:
            await _close(each)
        if old is not None:
            await _close(old)
        rec.ledger.close()
        writer.close()
    return 0


async def _snapshots(writer: asyncio.StreamWriter, rec: Recorder) -> None:
    # every snapshot carries the per-second histograms: the live monitor's timeline
    # draws them, and a worker killed on purpose (a rolling update's abrupt stop)
    # never sends its final figures. Between snapshots, the clients' send counts are
    # marked every MARK_NS (a timer, not a cost per message): the accountant dates each
    # message by them
    marks = round(_NS / MARK_NS)
    while True:
        for _ in range(marks):
            await asyncio.sleep(MARK_NS / _NS)
            rec.mark()
        await protocol.send(writer, protocol.Snapshot(rec.figures()))


async def _report_done(writer: asyncio.StreamWriter, runs: list[asyncio.Task[None]]) -> None:
    await asyncio.gather(*runs, return_exceptions=True)
    await protocol.send(writer, protocol.Done())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mqlab-worker", description="mqlab worker process")
    parser.add_argument("--control", required=True, help="controller HOST:PORT")
    parser.add_argument("--name", required=True)
    parser.add_argument("--netns", help="network namespace the driver's traffic runs in")
    args = parser.parse_args(argv)
    # read once and removed: nothing this worker starts (a driver's helper) inherits it
    token = os.environ.pop(protocol.TOKEN_ENV, "")
    host, _, port = args.control.rpartition(":")
    sock = None
    if args.netns:
        # the control channel stays on this namespace's loopback; everything the driver
        # opens from here on (its sockets, its threads) lives in the step's namespace
        sock = socket.create_connection((host, int(port)))
        try:
            netns.enter(args.netns)
        except MqlabError as exc:
            print(f"mqlab worker: {exc}", file=sys.stderr)
            return 1
    try:
        return run(lambda: serve(host, int(port), args.name, sock, token))
    except protocol.FrameError as exc:  # one line in its stderr: the step's error says it
        print(f"mqlab worker: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
