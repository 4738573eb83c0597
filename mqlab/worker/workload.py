"""Workloads: what a client sends and how a server answers.

Closed loop: N concurrent senders, each waiting for its call/cast/notify to
complete before the next (the simulator's "threads"). Open loop: a fixed rate;
each message has an intended send time on a fixed schedule and latency is
counted from it, so a stalled driver cannot hide its stall (coordinated
omission corrected).
"""

from __future__ import annotations

import asyncio
import math
from asyncio import FIRST_COMPLETED

from mqlab.codec import Codec
from mqlab.config.sizes import SizeSampler
from mqlab.errors import TransportError
from mqlab.measure.figures import OpenLoop
from mqlab.transport import Handler, Target, Transport, cast_starter
from mqlab.worker import clock
from mqlab.worker.eager import start_eagerly
from mqlab.worker.pacer import Pacer
from mqlab.worker.recorder import Recorder

#: open loop: most messages in flight at once before the schedule falls behind
MAX_IN_FLIGHT = 10_000
#: a closed-loop sender yields to the loop at least this often, in case a
#: transport completes sends without ever suspending
_YIELD_EVERY = 64


def server_handler(
    codec: Codec, rec: Recorder, group: int, reply: bool, topic: str = ""
) -> Handler:
    """The core's handler: decode, record receipt (and latency), answer a call.

    ``topic``: count this handler's deliveries under it (a worker serving several queues,
    for their spread); "" counts nothing more, the usual case.
    """
    if topic:
        return _CountingHandler(codec, rec, group, reply, topic)
    return _ServerHandler(codec, rec, group, reply)


class _ServerHandler:
    """A server's handler (an object, not a closure: compiled, its calls are direct)."""

    def __init__(self, codec: Codec, rec: Recorder, group: int, reply: bool) -> None:
        self.codec = codec
        self.rec = rec
        self.group = group
        self.reply = reply

    def __call__(self, body: bytes) -> bytes | None:
        try:
            client, seq, ts = self.codec.decode(body)
        except Exception:  # noqa: BLE001 - a foreign or corrupt message is counted, not fatal
            self.rec.on_error("BadMessage")
            return None
        self.rec.on_received(self.group, client, seq, ts)
        return self.codec.reply(client, seq, ts) if self.reply else None


class _CountingHandler(_ServerHandler):
    """A server's handler that also counts its topic's deliveries (and the last one's time)."""

    def __init__(self, codec: Codec, rec: Recorder, group: int, reply: bool, topic: str) -> None:
        super().__init__(codec, rec, group, reply)
        self.box = rec.per_topic.setdefault(topic, [0, 0])  # deliveries, the last one's time
        self.now_ns = clock.now  # the controller's clock, as every worker time is

    def __call__(self, body: bytes) -> bytes | None:
        box = self.box
        box[0] += 1
        box[1] = self.now_ns()
        return super().__call__(body)


class ClientLoad:
    """One client's sends: numbering, encoding, the transport call, the bookkeeping."""

    def __init__(
        self,
        transport: Transport,
        pattern: str,
        targets: list[Target],
        codec: Codec,
        sizes: SizeSampler,
        rec: Recorder,
        client_id: int,
        timeout: float,
    ) -> None:
        self.transport = transport
        self.pattern = pattern
        self.targets = targets
        self.codec = codec
        self.sizes = sizes
        self.rec = rec
        self.client_id = client_id
        self.timeout = timeout
        self.seq = 0  # the next message's number: also how many this client has sent
        rec.count_sends(client_id, lambda: self.seq)
        self._encode = codec.encoder(client_id)
        self._size = sizes.next
        # one target and one size, the usual case: nothing to choose per message
        self._only = targets[0] if len(targets) == 1 else None
        self._fixed = sizes.fixed
        # a cast or a notification is one call, looked up once, not per message; it
        # returns what is left to await, if anything (a cast that went out at once: nothing)
        self._call = pattern == "call"
        self._send = cast_starter(transport) if pattern == "cast" else transport.notify
        self.stop = asyncio.Event()
        self.paced = 0  # open loop: messages handed to the driver
        self.behind = 0  # open loop: the latest hand-off after its intended time (ns)

    async def one(self, intended: int, deadline: int = 0) -> None:
        """Send one message meant to leave at ``intended`` (open loop; a closed loop's call)."""
        now = intended
        if deadline:
            # open loop: a message that falls due before the window's end but whose
            # turn comes after it is not sent late; the schedule accounts for it
            now = clock.now()
            if now >= deadline:
                return
            self.behind = max(self.behind, now - intended)
            self.paced += 1
        seq, target, body = self._next(now, intended)
        try:
            if self._call:
                reply = await self.transport.call(target, body, self.timeout)
                client, rseq, ts = self.codec.decode(reply)
                if client != self.client_id or rseq != seq:
                    # an answer to another call is not this call's answer
                    self.rec.on_error(
                        "ReplyMismatch", intended, f"reply {client}/{rseq} to call {seq}"
                    )
                    return
                self.rec.on_reply(ts)
            else:
                waiting = self._send(target, body)
                if waiting is not None:
                    await waiting
        except Exception as exc:  # noqa: BLE001 - an unmapped library error is still counted
            self._failed(exc, intended, seq)

    def _next(self, now: int, intended: int) -> tuple[int, Target, bytes]:
        """Number, count and encode the next message: (its number, target, body)."""
        seq = self.seq
        self.seq = seq + 1  # counted as sent (count_sends) with its second binned, together
        self.rec.on_sent(now, intended)
        target = self._only or self.targets[seq % len(self.targets)]
        return seq, target, self._encode.encode(seq, intended, self._fixed or self._size())

    def _failed(self, exc: Exception, intended: int, seq: int) -> None:
        """A send that raised (message ``seq``), counted by its kind; an error the driver
        did not map, too."""
        if isinstance(exc, TransportError):
            self.rec.on_error(exc.kind, intended, str(exc), self.client_id, seq)
        else:
            self.rec.on_error(f"Unmapped:{type(exc).__name__}", intended, str(exc))

    async def closed_loop(self, concurrency: int, start: int, end: int, batch: int = 0) -> None:
        """``concurrency`` senders until ``end``; with ``batch``, until this client has sent
        that many messages (a fixed batch, sent as fast as the driver takes it)."""
        await _sleep_until(start)
        async with asyncio.TaskGroup() as tg:
            for _ in range(concurrency):
                tg.create_task(self._sender(end, batch or 1 << 62))

    async def _sender(self, end: int, limit: int = 1 << 62) -> None:
        now_ns = clock.now
        stop = self.stop
        if self._call:
            while not stop.is_set():
                now = now_ns()
                if now >= end or self.seq >= limit:
                    return
                await self.one(now)
            return
        # a cast or notification is sent from this loop: at most one coroutine per message
        # (the driver's; none for a cast that goes out at once), in bursts of _YIELD_EVERY
        # between turns of the event loop; each message still stamped with its own time
        rec = self.rec
        encode = self._encode
        send = self._send
        only = self._only
        targets = self.targets
        size = self._fixed
        while not stop.is_set():
            for _ in range(_YIELD_EVERY):
                now = now_ns()
                seq = self.seq
                if now >= end or seq >= limit:
                    return
                self.seq = seq + 1  # counted as sent (count_sends), its second binned too
                rec.on_sent(now, now)
                body = encode.encode(seq, now, size or self._size())
                try:
                    waiting = send(only or targets[seq % len(targets)], body)
                    if waiting is not None:
                        await waiting
                        if stop.is_set():
                            return
                except Exception as exc:  # noqa: BLE001 - counted, as in one()
                    self._failed(exc, now, seq)
            await asyncio.sleep(0)

    async def open_loop(self, rate: float, start: int, end: int, schedule_from: int = 0) -> None:
        """Send on a fixed schedule in [start, end); never after ``end``; account for the rest.

        A client that replaces another mid-step (a rolling update) continues its
        predecessor's schedule from ``schedule_from``, when the predecessor stopped: the
        messages due between then and this client's ``start`` are scheduled and never
        sent, and say so, rather than vanish from the schedule.
        """
        interval = 1e9 / rate
        anchor = schedule_from if 0 < schedule_from < start else start
        total = max(0, math.ceil((end - anchor) / interval))
        skipped = min(total, max(0, math.ceil((start - anchor) / interval)))
        in_flight: set[asyncio.Task[None]] = set()
        now_ns = clock.now
        k = skipped
        pacer = Pacer(anchor + int(skipped * interval), interval, end)

        def so_far() -> OpenLoop:
            # every message reached so far was due; those not handed over are not sent
            return OpenLoop(k, self.paced, k - self.paced, self.behind, end - anchor)

        self.rec.count_open_loop(self.client_id, so_far)
        try:
            while k < total and not self.stop.is_set():
                if len(in_flight) >= MAX_IN_FLIGHT:
                    # no room: the schedule falls behind, and that shows in latency
                    await asyncio.wait(in_flight, timeout=0.05, return_when=FIRST_COMPLETED)
                else:
                    await pacer.wait()
                now = now_ns()
                if now >= end:
                    break
                while k < total and len(in_flight) < MAX_IN_FLIGHT:
                    intended = anchor + int(k * interval)
                    if intended > now:
                        break
                    k += 1
                    task = start_eagerly(self.one(intended, end))
                    if task is not None:
                        in_flight.add(task)
                        task.add_done_callback(in_flight.discard)
        finally:
            pacer.close()
        if in_flight:
            await asyncio.gather(*in_flight, return_exceptions=True)
        # a stop from the user ends the schedule where it stood, not at the window's end
        until = min(end, now_ns()) if self.stop.is_set() else end
        due = min(total, max(k, math.ceil((until - anchor) / interval)))
        sent = self.paced
        rec = self.rec
        # unsent ones are the schedule's first (due before this client started) and its
        # last (created too late, or never created)
        first_in = math.ceil((rec.window_start - anchor) / interval)
        end_in = math.ceil((rec.window_end - anchor) / interval)
        in_window = max(0, min(skipped, end_in) - max(0, first_in))
        in_window += max(0, min(due, end_in) - max(skipped + sent, first_in))
        rec.on_open_loop(
            OpenLoop(due, sent, due - sent, self.behind, end - anchor), in_window, self.client_id
        )


async def _sleep_until(t: int) -> None:
    delay = (t - clock.now()) / 1e9
    if delay > 0:
        await asyncio.sleep(delay)
