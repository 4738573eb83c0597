"""The kit's server-restart checks on the amqp1 plugin on ActiveMQ Artemis, on a broker of
this module's own (the session's is shared by the other Artemis tests, which cannot see it
restart).

The broker is the single managed Artemis as a run starts it, restarted as a step's node fault
event restarts it: through the step's broker side (its ``node_control``, one node,
:class:`~mqlab.servers.nodes.ProcessNodes`), SIGTERM or SIGKILL, then the same command line
again on its own port and journal. A file of its own: pytest-xdist (``--dist loadfile``) gives
it a worker beside the RabbitMQ and Kafka restarts.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from mqlab import registry
from mqlab.config.events import FaultEvent
from mqlab.errors import BrokerError
from mqlab.faults.broker import BrokerFaults
from mqlab.servers import managed
from mqlab.servers.brokerside import BrokerSide
from mqlab.servers.handle import ServerHandle
from mqlab.testing import ConformanceSuite, Recorder, Subject
from mqlab.transport import Target
from tests.test_broker import _accepts
from tests.test_replicated import _running_under

from .kit import eventually, node_restarts
from .test_conformance import FIELDS

pytestmark = pytest.mark.broker

Managed = tuple[ServerHandle, BrokerSide]
OPTIONS = {"broker": "artemis"}


@pytest.fixture(scope="module")
def artemis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Managed]:
    state_dir = tmp_path_factory.mktemp("artemis-restarted")
    try:
        with managed.managed(["artemis"], state_dir) as handles:
            handle = handles["artemis"]
            yield handle, managed.sides({"a": handle.urls}, {"a": "artemis"}, handles)["a"]
    except BrokerError as exc:
        pytest.fail(f"cannot start the test Artemis broker: {exc}", pytrace=False)
    # stopped by PID: the JVM a restart started too
    assert _running_under(state_dir) == [], "an Artemis JVM outlived the module's stop"


def _subject(artemis: Managed) -> Subject:
    handle, side = artemis
    assert side.node_control is not None
    return Subject(
        "amqp1",
        urls=handle.urls,
        options=OPTIONS,
        at_most_once_options=FIELDS["amqp1"]["at_most_once_options"],
        restart=node_restarts(side.node_control),
    )


# settled (at least once) and pre-settled (at most once), as the suite parametrizes them; the
# kill check needs Features.mandatory, which amqp1 does not declare
@pytest.mark.parametrize("delivery_mode", ["default", "at-most-once"])
def test_the_server_restarts_under_load(artemis: Managed, delivery_mode: str) -> None:
    ConformanceSuite().test_the_server_restarts_under_load(_subject(artemis), delivery_mode)


def test_a_node_event_kills_a_single_managed_artemis_and_starts_it_on_its_journal(
    artemis: Managed,
) -> None:
    """`kill_node node1` on a run's single managed Artemis (not only on a replicated pair):
    the step's broker effector kills its JVM, and what a step does after its window starts
    it again on its port and journal: a durable cast it accepted before is still there, and
    the step samples the new JVM's CPU, not the dead one's."""
    handle, side = artemis
    control = side.node_control
    assert control is not None, "a node event on a single Artemis has nothing to act on"
    port = int(handle.facts["port"])
    plugin = registry.get("amqp1")
    target = Target(f"journal-{uuid.uuid4().hex[:8]}", "kept", durable=True)

    async def nowhere() -> str:  # node = "queues" is RabbitMQ's: never asked here
        raise AssertionError("a node1 event asked where the queues are")

    async def scenario() -> None:
        faults = BrokerFaults(control, nowhere)
        async with plugin.build(handle.urls, OPTIONS, "client") as client:
            await client.cast(target, b"accepted before the kill")  # settled: journaled
        before = side.pids()
        said = await faults.fire(FaultEvent(0.0, "kill_node", "node1"))
        assert str(said).startswith("node1: Artemis node1 killed"), said
        assert not _accepts(port) and side.pids() == ()
        put_back = await faults.restore()
        assert put_back.startswith("node1: Artemis node1 started"), put_back
        assert _accepts(port) and side.pids() and side.pids() != before
        got = Recorder()
        async with plugin.build(handle.urls, OPTIONS, "server") as server:
            await server.serve_rpc(target.to_server("s1"), got)
            await eventually(lambda: len(got) >= 1, 10)
            await asyncio.sleep(0.3)  # anything more would be a duplicate
        assert got.bodies == [b"accepted before the kill"]

    asyncio.run(scenario())
