"""A whole mqlab transport in one file: messages travel between coroutines of one process."""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from collections.abc import Mapping
from typing import ClassVar

from mqlab.errors import CallTimeout, Undeliverable
from mqlab.transport import Features, Handler, Option, Target, Transport, TransportConfig

# the "broker", shared by every MemoryTransport of the process:
# (exchange, topic) -> server name -> handler, and (exchange, topic) -> pool -> listeners
SERVERS: dict[tuple[str, str], dict[str, Handler]] = defaultdict(dict)
POOLS: dict[tuple[str, str], dict[str, list[Handler]]] = defaultdict(lambda: defaultdict(list))
# round robin: one counter per topic (among its servers) and per pool (among its listeners)
TURNS: dict[tuple[str, ...], itertools.count[int]] = defaultdict(itertools.count)


def pick(key: tuple[str, ...], handlers: list[Handler]) -> Handler:
    return handlers[next(TURNS[key]) % len(handlers)]


class MemoryTransport(Transport):
    wire = "memory"
    # mandatory: a call or cast nobody serves fails at once; in_process: no network
    features = Features(mandatory=True, fanout=True, server=None, in_process=True)
    # the core refuses unknown names, wrong types and values out of bounds, naming the option
    option_specs: ClassVar[Mapping[str, Option]] = {
        "delay": Option((int, float), 0.0, "seconds every message spends in transit", minimum=0),
    }

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self.servers: list[tuple[tuple[str, str], str]] = []
        self.listeners: list[tuple[list[Handler], Handler]] = []

    async def aclose(self) -> None:
        for key, name in self.servers:
            SERVERS[key].pop(name, None)
        for listeners, handler in self.listeners:
            listeners.remove(handler)
        self.servers, self.listeners = [], []

    async def serve_rpc(self, target: Target, handler: Handler) -> None:
        key, name = (target.exchange, target.topic), target.server or "default"
        SERVERS[key][name] = handler
        self.servers.append((key, name))

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        listeners = POOLS[target.exchange, target.topic][pool]
        listeners.append(handler)
        self.listeners.append((listeners, handler))

    def route(self, target: Target) -> list[Handler]:
        key = (target.exchange, target.topic)
        servers = SERVERS.get(key, {})
        if target.fanout:
            chosen = list(servers.values())
        elif target.server:
            chosen = [servers[target.server]] if target.server in servers else []
        else:
            chosen = [pick(key, list(servers.values()))] if servers else []
        if not chosen:
            raise Undeliverable(f"nobody serves {target.exchange}/{target.topic}")
        return chosen

    def deliver(self, handler: Handler, body: bytes) -> None:
        asyncio.get_running_loop().call_later(self.options["delay"], handler, body)

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        (handler,) = self.route(target)
        try:
            async with asyncio.timeout(timeout):
                await asyncio.sleep(self.options["delay"])
        except TimeoutError as exc:
            raise CallTimeout(f"no reply within {timeout:g}s") from exc
        return handler(body) or b""

    async def cast(self, target: Target, body: bytes) -> None:
        for handler in self.route(target):
            self.deliver(handler, body)

    async def notify(self, target: Target, body: bytes) -> None:
        for pool, listeners in POOLS.get((target.exchange, target.topic), {}).items():
            if listeners:  # a pool nobody listens to loses it, like an unbound exchange
                self.deliver(pick((target.exchange, target.topic, pool), listeners), body)
