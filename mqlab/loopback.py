"""The loopback transport: in-process, no dependency, all three patterns.

It is the core's test double and the harness's own ceiling: a loopback step
runs servers and clients in one process, so what it measures is mqlab's own
per-message cost (encode, schedule, decode, record), nothing else. It never
stands in for a driver's test.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Awaitable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from mqlab.errors import CallTimeout, Undeliverable
from mqlab.native import mypyc_attr
from mqlab.transport import Features, Handler, Option, Target, Transport, TransportConfig

_Item = tuple[bytes, "asyncio.Future[bytes] | None"]


class _Mailbox:
    """A bounded FIFO from senders to one consumer task.

    asyncio.Queue's back-pressure without its per-item bookkeeping (the
    unfinished-task count, the join event, a coroutine per put): on the harness's
    path each message passes through here once.
    """

    __slots__ = ("_getter", "items", "limit", "putters")

    def __init__(self, limit: int) -> None:
        self.items: deque[_Item] = deque()
        self.limit = limit
        self.putters: deque[asyncio.Future[None]] = deque()  # senders waiting for room
        self._getter: asyncio.Future[None] | None = None  # the consumer, waiting for an item

    def offer(self, item: _Item) -> bool:
        """Queue ``item`` if there is room; False (and nothing queued) when full."""
        if len(self.items) >= self.limit:
            return False
        self.items.append(item)
        getter = self._getter
        if getter is not None:
            self._getter = None
            if not getter.done():
                getter.set_result(None)
        return True

    async def put(self, item: _Item) -> None:
        """Queue ``item``, waiting for room as long as it takes."""
        while not self.offer(item):
            room = asyncio.get_running_loop().create_future()
            self.putters.append(room)
            try:
                await room
            except BaseException:
                if room.done() and not room.cancelled():
                    self.make_room()  # woken, then cancelled: the room is another's
                room.cancel()
                raise

    def make_room(self) -> None:
        """Wake the longest-waiting sender (the consumer took one item)."""
        while self.putters:
            room = self.putters.popleft()
            if not room.done():
                room.set_result(None)
                return

    async def wait(self) -> None:
        """Until an item is queued (the consumer's side)."""
        while not self.items:
            self._getter = asyncio.get_running_loop().create_future()
            await self._getter


@dataclass
class _Consumer:
    box: _Mailbox
    task: asyncio.Task[None] | None = None


@dataclass
class _Group:
    """Consumers that share messages round robin (RPC servers of a topic, a pool)."""

    members: list[_Consumer] = field(default_factory=list)
    _rr: Iterator[int] = field(default_factory=itertools.count)

    def pick(self) -> _Consumer | None:
        members = self.members
        if len(members) == 1:
            return members[0]
        if not members:
            return None
        return members[next(self._rr) % len(members)]


@dataclass
class _Bus:
    rpc: dict[tuple[str, str], _Group] = field(default_factory=dict)
    direct: dict[tuple[str, str, str], _Consumer] = field(default_factory=dict)
    pools: dict[tuple[str, str], dict[str, _Group]] = field(default_factory=dict)


# one bus per event loop: every loopback transport in a process shares it
_buses: dict[int, _Bus] = {}


def _bus() -> _Bus:
    return _buses.setdefault(id(asyncio.get_running_loop()), _Bus())


# compiled, subclassable all the same: tests and users slow it down or break it on purpose
@mypyc_attr(allow_interpreted_subclasses=True)
class LoopbackTransport(Transport):
    """In-process queues between coroutines of one worker."""

    wire = "loopback"
    # mandatory: a call or cast nobody serves fails at once with Undeliverable
    features = Features(mandatory=True, fanout=True, durable=False, server=None, in_process=True)
    option_specs: ClassVar[Mapping[str, Option]] = {
        "queue_size": Option((int,), 1024, "bounded queue per consumer (back-pressure)", minimum=1),
    }

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self._consumers: list[_Consumer] = []
        self._bus = _Bus()
        # id(target) -> (target, its group): a client casts to the same Target objects
        # again and again, so their routing is looked up once (a group, once on the bus,
        # stays there: its members change, read at each pick). The target is kept, so its
        # id is not reused while it is here
        self._groups: dict[int, tuple[Target, _Group]] = {}

    async def start(self) -> None:
        # looked up once: the running loop's bus is shared by every loopback transport
        self._bus = _bus()

    async def aclose(self) -> None:
        bus = self._bus
        mine = set(map(id, self._consumers))
        for group in list(bus.rpc.values()) + [
            g for pools in bus.pools.values() for g in pools.values()
        ]:
            group.members[:] = [m for m in group.members if id(m) not in mine]
        for key, cons in list(bus.direct.items()):
            if id(cons) in mine:
                del bus.direct[key]
        for cons in self._consumers:
            if cons.task is not None:
                cons.task.cancel()
        for cons in self._consumers:
            if cons.task is not None:
                await asyncio.gather(cons.task, return_exceptions=True)
        self._consumers.clear()

    def _consumer(self, handler: Handler) -> _Consumer:
        cons = _Consumer(_Mailbox(self.options["queue_size"]))
        cons.task = asyncio.get_running_loop().create_task(self._consume(cons.box, handler))
        self._consumers.append(cons)
        return cons

    @staticmethod
    async def _consume(box: _Mailbox, handler: Handler) -> None:
        items, putters = box.items, box.putters
        take = items.popleft
        while True:
            await box.wait()
            # drain what is already queued before yielding: far fewer wake-ups
            while items:
                body, reply = take()
                if putters:
                    box.make_room()
                result = handler(body)
                if reply is not None and not reply.done() and result is not None:
                    reply.set_result(result)

    async def serve_rpc(self, target: Target, handler: Handler) -> None:
        bus = self._bus
        cons = self._consumer(handler)
        bus.rpc.setdefault((target.exchange, target.topic), _Group()).members.append(cons)
        if target.server:
            bus.direct[(target.exchange, target.topic, target.server)] = cons

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        pools = self._bus.pools.setdefault((target.exchange, target.topic), {})
        pools.setdefault(pool, _Group()).members.append(self._consumer(handler))

    def _route(self, target: Target) -> list[_Consumer]:
        if not target.fanout:
            return [self._one(target)]
        group = self._bus.rpc.get((target.exchange, target.topic))
        if not group or not group.members:
            raise Undeliverable(f"no loopback server for {target.exchange}/{target.topic}")
        return list(group.members)

    def _one(self, target: Target) -> _Consumer:
        """The consumer a targeted or round-robin message goes to (not a fanout)."""
        bus = self._bus
        if target.server:
            one = bus.direct.get((target.exchange, target.topic, target.server))
        else:
            group = bus.rpc.get((target.exchange, target.topic))
            one = None
            if group is not None:
                self._groups[id(target)] = (target, group)
                one = group.pick()
        if one is None:
            raise Undeliverable(f"no loopback server for {target.exchange}/{target.topic}")
        return one

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        await self._route(target)[0].box.put((body, fut))
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError as exc:
            raise CallTimeout(f"no reply within {timeout:g}s") from exc

    async def cast(self, target: Target, body: bytes) -> None:
        waiting = self.begin_cast(target, body)
        if waiting is not None:
            await waiting

    def begin_cast(self, target: Target, body: bytes) -> Awaitable[None] | None:
        item = (body, None)
        known = self._groups.get(id(target))
        if known is not None and known[0] is target:
            one = known[1].pick()  # a target seen before: its group, no lookup
        elif target.fanout:
            return self._fanout(target, item)
        else:
            one = self._one(target)
        if one is None:
            one = self._one(target)  # nobody serves it now: Undeliverable, as any lookup says
        box = one.box
        # room: queued at once, no coroutine (the usual case); full: wait for room
        return None if box.offer(item) else box.put(item)

    async def _fanout(self, target: Target, item: _Item) -> None:
        for cons in self._route(target):
            await cons.box.put(item)

    async def notify(self, target: Target, body: bytes) -> None:
        # like an exchange with no queue bound: nobody listening means dropped
        for group in self._bus.pools.get((target.exchange, target.topic), {}).values():
            cons = group.pick()
            if cons is not None:
                await cons.box.put((body, None))
