"""The second model plugin (examples/redis_lists.py) passes the kit on a real Redis, and the
kit's idle and dropped-connection checks fail the two mistakes its newcomer's tests caught."""

from __future__ import annotations

import pytest

from examples.redis_lists import LOST, RedisListsTransport
from mqlab.servers.handle import ServerHandle
from mqlab.testing import ConformanceSuite, Subject, resilience, run

from .test_conformance_beyond import redis_leftovers


def _subject(transport: type[RedisListsTransport], server: ServerHandle, **kw: object) -> Subject:
    return Subject(
        transport,
        urls=server.urls,
        leftovers=redis_leftovers(server.urls[0]),
        bad_options={"block": 0},
        ceiling=False,  # an example: no library loop of its own to measure
        **kw,  # type: ignore[arg-type]
    )


class TestRedisListsExample(ConformanceSuite):
    @pytest.fixture
    def subject(self, redis_server: ServerHandle) -> Subject:
        return _subject(RedisListsTransport, redis_server)


class KeepsTheDefaultSocketTimeout(RedisListsTransport):
    """A client built as redis-py examples build it: every read cut after 5 s."""

    socket_timeout = 5.0


class ReusesADeadConnection(RedisListsTransport):
    """A reader that ends quietly on a lost connection: nothing reads its list again."""

    async def _read(self, name: str, handler: object) -> None:
        try:
            await super()._read(name, handler)  # type: ignore[arg-type]
        except LOST:
            return

    async def _reconnected(self) -> None:
        raise ConnectionError("gone")  # what a reader that gives up does, said by raising


def test_a_socket_timeout_shorter_than_a_blocking_read_fails_the_idle_check(
    redis_server: ServerHandle,
) -> None:
    subject = _subject(KeepsTheDefaultSocketTimeout, redis_server, options={"block": 30})
    with pytest.raises(AssertionError, match="while idle"):
        run(resilience.idle_then_send, subject)


def test_a_reader_that_dies_quietly_with_its_connection_fails_the_drop_check(
    redis_server: ServerHandle,
) -> None:
    subject = _subject(ReusesADeadConnection, redis_server, arrival=3.0)
    with pytest.raises(AssertionError, match=r"none arrived|said nothing|never answered"):

        async def check(subject: Subject) -> None:
            await resilience.dropped_connection(subject, {})

        run(check, subject)
