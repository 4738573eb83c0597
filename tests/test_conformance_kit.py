"""The conformance kit passes loopback and fails transports that break the contract."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Mapping
from typing import ClassVar

import pytest

from examples.memory_transport import MemoryTransport
from mqlab.errors import ConnectFailed
from mqlab.loopback import LoopbackTransport
from mqlab.testing import ConformanceSuite, Subject, ceiling, delivery, lifecycle, run
from mqlab.transport import Handler, Option, Target
from tests.helpers import ROOT


class TestLoopback(ConformanceSuite):
    @pytest.fixture
    def subject(self) -> Subject:
        # in one process: no socket to idle or drop, so the idle check need not wait long
        return Subject("loopback", bad_options={"queue_size": 1.5}, ceiling=False, idle=0.2)


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


class ShowsThePassword(LoopbackTransport):
    """Fails to connect, quoting the URL as given."""

    async def start(self) -> None:
        raise ConnectFailed(f"cannot connect to {self.urls[0]}")


class ForgetsABound(LoopbackTransport):
    """Declares queue_size without its lower bound: 0 would deadlock every consumer."""

    option_specs: ClassVar[Mapping[str, Option]] = {
        "queue_size": Option((int,), 1024, "bounded queue per consumer"),
    }


class RoutesByTopic(LoopbackTransport):
    """Works out where a topic's casts go once, from the first target it sees."""

    _first: dict[str, Target] = {}  # noqa: RUF012 - per class, as a plugin's cache would be

    async def cast(self, target: Target, body: bytes) -> None:
        await super().cast(self._first.setdefault(target.topic, target), body)


class DropsWhenFull(LoopbackTransport):
    """Sends a cast at once if there is room, and reports it sent when there is not."""

    def begin_cast(self, target: Target, body: bytes) -> None:
        self._one(target).box.offer((body, None))


def test_a_transport_whose_begin_cast_drops_what_would_wait_fails() -> None:
    subject = Subject(DropsWhenFull, options={"queue_size": 10}, arrival=1.0)
    with pytest.raises(AssertionError, match="casts sent through begin_cast: 990 of 1000 lost"):
        run(delivery.casts_as_the_core_sends_them, subject)


def test_a_transport_that_keeps_one_destination_per_topic_fails() -> None:
    with pytest.raises(AssertionError, match="casts to every server, at s1: 5 of 5 lost"):
        run(delivery.each_cast_goes_where_its_target_says, Subject(RoutesByTopic, arrival=1.0))


def test_a_transport_that_shows_the_password_fails() -> None:
    subject = Subject(ShowsThePassword, urls=("loopback://user:pw@127.0.0.1:1/",))
    with pytest.raises(AssertionError, match="ConnectFailed shows the password"):
        run(lifecycle.connect_failure, subject)


def test_a_transport_that_accepts_a_value_it_must_refuse_fails() -> None:
    subject = Subject(ForgetsABound, bad_options={"queue_size": 0})
    with pytest.raises(AssertionError, match="accepted the option queue_size=0"):
        run(lifecycle.refused_options, subject)


def test_a_transport_that_drops_a_notification_pool_fails() -> None:
    with pytest.raises(AssertionError, match="pool of one: 40 of 40 lost"):
        run(delivery.every_pool_gets_every_notification, Subject(DropsAPool, arrival=1.0))


def test_a_plugin_without_a_reference_loop_fails_and_is_told_what_to_ship() -> None:
    with pytest.raises(AssertionError, match=r"ships no reference loop .*'A reference loop'"):
        run(ceiling.reference_loop, Subject(DropsAPool))


def test_a_transport_that_leaks_a_task_on_close_fails() -> None:
    with pytest.raises(AssertionError, match=r"task\(s\) left after aclose"):
        run(lifecycle.clean_close, Subject(LeaksATask))


class TestTheDocsExample(ConformanceSuite):
    """docs/writing-a-plugin.md's example transport passes the kit, with a delay too."""

    @pytest.fixture(params=[0.0, 0.01], ids=["no-delay", "delay"])
    def subject(self, request: pytest.FixtureRequest) -> Subject:
        return Subject(
            MemoryTransport,
            options={"delay": request.param},
            bad_options={"delay": -1},
            ceiling=False,
            idle=0.2,
        )


def test_the_docs_show_the_example_as_it_is() -> None:
    doc = (ROOT / "docs" / "writing-a-plugin.md").read_text(encoding="utf-8")
    code = (ROOT / "examples" / "memory_transport.py").read_text(encoding="utf-8")
    assert f"```python\n{code}```" in doc, "copy examples/memory_transport.py into the doc"


def test_only_the_kit_imports_pytest() -> None:
    """mqlab itself runs without pytest installed: no module outside mqlab.testing imports it."""
    script = (
        "import pkgutil, importlib, sys, mqlab\n"
        "for m in pkgutil.iter_modules(mqlab.__path__, 'mqlab.'):\n"
        "    if m.name != 'mqlab.testing':\n"
        "        importlib.import_module(m.name)\n"
        "print('pytest' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
