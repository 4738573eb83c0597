"""The conformance kit passes loopback and fails transports that break the contract."""

from __future__ import annotations

import asyncio

import pytest

from mqlab.loopback import LoopbackTransport
from mqlab.testing import ConformanceSuite, Subject, delivery, lifecycle, run
from mqlab.transport import Handler, Target


class TestLoopback(ConformanceSuite):
    @pytest.fixture
    def subject(self) -> Subject:
        return Subject("loopback", bad_options={"queue_size": 1.5})


class DropsAPool(LoopbackTransport):
    """Serves only the first notification pool of a target: the others never hear anything."""

    _first_pool: dict[Target, str] = {}  # noqa: RUF012 - shared on purpose, as a bus would be

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        if self._first_pool.setdefault(target, pool) == pool:
            await super().serve_notifications(target, pool, handler)


class LeaksATask(LoopbackTransport):
    """Starts a background task that aclose() forgets."""

    async def start(self) -> None:
        await super().start()
        self._forgotten = asyncio.get_running_loop().create_task(asyncio.sleep(3600))


def test_a_transport_that_drops_a_notification_pool_fails() -> None:
    with pytest.raises(AssertionError, match="pool of one: 40 of 40 lost"):
        run(delivery.every_pool_gets_every_notification, Subject(DropsAPool, arrival=1.0))


def test_a_transport_that_leaks_a_task_on_close_fails() -> None:
    with pytest.raises(AssertionError, match=r"task\(s\) left after aclose"):
        run(lifecycle.clean_close, Subject(LeaksATask))
