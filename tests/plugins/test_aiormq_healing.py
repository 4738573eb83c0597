"""The aiormq plugin's connection heals: the broker closes it under casts and calls, the
transport says so once, reconnects, restores its consumers and reply queue, and its sends
keep their delivery promise (at least once by default; at most once with ``no_ack``)."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from mqlab_aiormq import AiormqTransport

from mqlab.errors import ConnectionLost, TransportError
from mqlab.transport import Target, TransportConfig

from .kit import Mgmt, eventually, kill_connections

pytestmark = pytest.mark.broker

Make = Callable[..., Awaitable[AiormqTransport]]


class Heard:
    """What a transport told the core: its reports and its timeline's events."""

    def __init__(self, transport: AiormqTransport) -> None:
        self.reports: list[TransportError] = []
        self.events: list[tuple[str, str]] = []  # (kind, connection)
        transport.on_report = self.reports.append
        transport.on_notice = lambda kind, _cause, conn: self.events.append((kind, conn))

    def kinds(self, kind: str) -> int:
        return sum(1 for k, _ in self.events if k == kind)


@pytest.fixture
def uid() -> str:
    return "heal" + uuid.uuid4().hex[:10]


@pytest.fixture
async def make(broker: Any) -> AsyncIterator[Make]:
    made: list[AiormqTransport] = []

    async def _make(worker: str, **options: Any) -> AiormqTransport:
        transport = AiormqTransport(TransportConfig((broker.url,), options, worker))
        await transport.start()
        made.append(transport)
        return transport

    yield _make
    for transport in reversed(made):
        await transport.aclose()


class Casting:
    """Four casters sending numbered casts until stopped: what returned, what failed."""

    def __init__(self, client: AiormqTransport, target: Target) -> None:
        self.client, self.target = client, target
        self.sent: list[bytes] = []
        self.failed: list[TransportError] = []
        self._stop = False
        self._lanes = [asyncio.create_task(self._lane(n)) for n in range(4)]

    async def _lane(self, lane: int) -> None:
        i = 0
        while not self._stop:
            body = b"%d-%d" % (lane, i)
            i += 1
            try:
                await self.client.cast(self.target, body)
            except TransportError as exc:
                self.failed.append(exc)
                await asyncio.sleep(0.01)
            else:
                self.sent.append(body)

    async def more(self, n: int) -> None:
        """Wait until ``n`` more casts returned."""
        mark = len(self.sent)
        await eventually(lambda: len(self.sent) >= mark + n, timeout=20)

    async def stop(self) -> None:
        self._stop = True
        await asyncio.wait_for(asyncio.gather(*self._lanes), 15)


async def _kill_and_heal(mgmt: Mgmt, uid: str, *heard: Heard) -> None:
    """Close both transports' connections (the broker's management API) and wait until
    each says it is back."""
    # the management API lists a connection a few seconds after it opened
    await eventually(lambda: len(mgmt.connections(uid)) == 2, timeout=15)
    assert await kill_connections(mgmt, uid) == 2, "the server's and the client's connection"
    await eventually(lambda: all(h.kinds("reconnected") for h in heard), timeout=20)


def _told_once(heard: Heard, worker: str) -> None:
    """One loss, one report in the one wording (password masked), one return, named."""
    assert len(heard.reports) == 1, heard.reports
    lost = heard.reports[0]
    assert isinstance(lost, ConnectionLost), lost
    assert " lost: " in str(lost) and str(lost).endswith("; reconnecting"), lost
    assert ":***@" in str(lost) and "guest:guest" not in str(lost), lost
    assert heard.kinds("connection_lost") == 1 and heard.kinds("reconnected") == 1, heard.events
    assert {conn for _, conn in heard.events} == {f"mqlab {worker}"}, heard.events


async def test_at_least_once_casts_and_calls_go_on_across_a_closed_connection(
    make: Make, mgmt: Mgmt, uid: str
) -> None:
    got: list[bytes] = []

    def handler(body: bytes) -> bytes:
        got.append(body)
        return b"re:" + body

    server = await make(f"{uid}-srv", multi_ack=4)
    await server.serve_rpc(Target(uid, f"{uid}-t", server="s1"), handler)
    client = await make(f"{uid}-cli")
    target = Target(uid, f"{uid}-t")
    assert await client.call(target, b"before", 5) == b"re:before"
    heard = Heard(server), Heard(client)

    casting = Casting(client, target)
    await casting.more(100)
    await _kill_and_heal(mgmt, uid, *heard)
    await casting.more(100)  # on the new connections: the server consumes again
    await casting.stop()

    # every cast waited for the new connection instead of failing, and each one that
    # returned (confirmed) arrived; a resent one may arrive twice
    assert casting.failed == []
    await eventually(lambda: set(got) >= set(casting.sent), timeout=15)
    _told_once(heard[0], f"{uid}-srv")
    _told_once(heard[1], f"{uid}-cli")
    # the reply queue consumes again, and the server answers on its new connection
    assert await client.call(target, b"after", 5) == b"re:after"
    assert await client.call(Target(uid, f"{uid}-t", server="s1"), b"direct", 5) == b"re:direct"


async def test_at_most_once_never_resends_a_cast_the_lost_connection_took(
    make: Make, mgmt: Mgmt, uid: str
) -> None:
    got: list[bytes] = []
    server = await make(f"{uid}-srv", no_ack=True)
    await server.serve_rpc(Target(uid, f"{uid}-t", server="s1"), got.append)
    client = await make(f"{uid}-cli", no_ack=True)
    target = Target(uid, f"{uid}-t")
    heard = Heard(server), Heard(client)

    casting = Casting(client, target)
    await casting.more(100)
    await _kill_and_heal(mgmt, uid, *heard)
    healed = len(casting.sent)
    await casting.more(100)
    await casting.stop()

    # the casts the connection took with it failed, saying they were not sent again...
    assert casting.failed, "a cast in flight when the connection closed must fail"
    for failure in casting.failed:
        assert isinstance(failure, ConnectionLost), failure
        assert "not resent" in str(failure), failure
    # ...and none arrived twice (what was on its way to the server when its own connection
    # closed is lost: at most once, and told by its report)
    await eventually(lambda: set(got) >= set(casting.sent[healed:]), timeout=15)
    await asyncio.sleep(0.3)
    twice = [body for body, n in Counter(got).items() if n > 1]
    assert twice == []
    _told_once(heard[0], f"{uid}-srv")
    _told_once(heard[1], f"{uid}-cli")


async def test_a_call_waiting_on_the_lost_connection_fails_and_the_next_is_answered(
    make: Make, mgmt: Mgmt, uid: str
) -> None:
    answer = asyncio.Event()

    def handler(body: bytes) -> bytes | None:
        return b"re:" + body if answer.is_set() else None  # the first never gets a reply

    server = await make(f"{uid}-srv")
    await server.serve_rpc(Target(uid, f"{uid}-t", server="s1"), handler)
    client = await make(f"{uid}-cli")
    target = Target(uid, f"{uid}-t")
    call = asyncio.ensure_future(client.call(target, b"lost", 20))
    await asyncio.sleep(0.3)
    await _kill_and_heal(mgmt, uid, Heard(server), Heard(client))
    with pytest.raises(ConnectionLost, match="lost while waiting for a reply"):
        await asyncio.wait_for(call, 5)  # at once, not at its 20 s timeout
    answer.set()
    assert await client.call(target, b"next", 5) == b"re:next"
