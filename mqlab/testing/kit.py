"""The checks' workbench: transports built and closed for one check, and what they received.

Every name a check creates (exchanges, topics, pools, worker names) carries the
check's unique :attr:`Kit.tag`, so checks never see each other's messages on a
shared server and a ``leftovers`` hook can find what one check left behind.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any, NamedTuple, Self

import pytest

from mqlab.testing.subject import Subject, build
from mqlab.transport import Features, Target, Transport, cast_starter

#: Extra wait once everything arrived: a message beyond that is a duplicate.
SETTLE = 0.2


class Kit:
    """Builds started transports for one check and closes every one at the end."""

    def __init__(self, subject: Subject) -> None:
        self.subject = subject
        self.cls = subject.load().cls
        self.tag = "kit" + uuid.uuid4().hex[:10]
        self._made: list[Transport] = []
        #: where this check's transports connect, when not ``Subject.urls`` (a proxy's)
        self.urls: tuple[str, ...] | None = None

    @property
    def features(self) -> Features:
        return self.cls.features

    @property
    def patterns(self) -> frozenset[str]:
        """The patterns the transport implements (the methods it overrides)."""
        return self.cls.patterns()

    def require(self, pattern: str | None = None, feature: str | None = None) -> None:
        """Skip the check, naming the declaration, unless the transport declares it."""
        if pattern is not None and pattern not in self.patterns:
            pytest.skip(f"{self.subject.name} does not declare the {pattern!r} pattern")
        if feature is not None and not getattr(self.features, feature):
            pytest.skip(f"{self.subject.name} does not declare Features.{feature}")

    def rpc(self, topic: str = "topic", **kw: Any) -> Target:
        """This check's RPC target (``server=``, ``fanout=`` as for Target)."""
        return Target(f"{self.tag}-rpc", f"{self.tag}-{topic}", **kw)

    def events(self) -> Target:
        """This check's notification target."""
        return Target(f"{self.tag}-notif", f"{self.tag}-events")

    def pool(self, name: str) -> str:
        return f"{self.tag}-{name}"

    async def transport(self, role: str, **options: Any) -> Transport:
        """A started transport named ``<tag>-<role>``, closed when the kit exits."""
        transport = build(self.subject, f"{self.tag}-{role}", options, self.urls)
        self._made.append(transport)
        await transport.start()
        return transport

    async def pair(self, **options: Any) -> Pair:
        """A client and a server serving every declared pattern: RPC as s1, one pool."""
        server = await self.transport("server", **options)
        client = await self.transport("client", **options)
        handled, heard = Recorder(), Recorder()
        if self.patterns & {"call", "cast"}:
            await server.serve_rpc(self.rpc(server="s1"), handled)
        if "notify" in self.patterns:
            await server.serve_notifications(self.events(), self.pool("pool"), heard)
        return Pair(server, client, handled, heard)

    async def settle(self, received: Callable[[], int], expected: int) -> None:
        """Wait until ``expected`` messages arrived (at most ``Subject.arrival`` s), then
        SETTLE more: whatever arrives then is a duplicate."""
        deadline = time.monotonic() + self.subject.arrival
        while received() < expected and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(SETTLE)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for transport in reversed(self._made):
            await transport.aclose()


class Pair(NamedTuple):
    server: Transport
    client: Transport
    handled: Recorder  # what the server's RPC handler got
    heard: Recorder  # what the server's notification listener got


class Recorder:
    """A server handler: records every body, replies ``re:<body>`` (ignored for casts)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def __call__(self, body: bytes) -> bytes:
        self.bodies.append(body)
        return b"re:" + body

    def __len__(self) -> int:
        return len(self.bodies)


def core_caster(client: Transport) -> Callable[[Target, bytes], Awaitable[None]]:
    """``client``'s casts as mqlab's senders send them: what :func:`cast_starter` picks
    (``begin_cast``, or a subclass's own ``cast``), awaiting only what it returns."""
    start = cast_starter(client)

    async def cast(target: Target, body: bytes) -> None:
        waiting = start(target, body)
        if waiting is not None:
            await waiting

    return cast


def bodies(what: str, n: int) -> list[bytes]:
    return [b"%s-%d" % (what.encode(), i) for i in range(n)]


def assert_once(what: str, received: Iterable[bytes], sent: Iterable[bytes]) -> None:
    """Every sent body was received exactly once, nothing else was."""
    got, want = Counter(received), Counter(sent)
    lost = sorted(want - got)
    extra = sorted(got - want)
    assert not lost and not extra, (
        f"{what}: {len(lost)} of {sum(want.values())} lost, "
        f"{len(extra)} duplicated or unexpected (first lost: {lost[:3]}, first extra: {extra[:3]})"
    )


Check = Callable[[Subject], Awaitable[None]]


def run(check: Check, subject: Subject, limit: float = 60.0) -> None:
    """Run one check on a fresh event loop; a hung transport fails it after ``limit`` s."""

    async def bounded() -> None:
        scope = asyncio.timeout(limit)
        try:
            async with scope:
                await check(subject)
        except TimeoutError as exc:
            if not scope.expired():
                raise  # a CallTimeout (a TimeoutError too) the check let through
            raise AssertionError(f"{check.__name__} did not finish within {limit:g}s") from exc

    asyncio.run(bounded())
