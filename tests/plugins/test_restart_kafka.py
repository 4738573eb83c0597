"""The kit's server-restart checks on the kafka plugin, on a Kafka broker of this module's own
(the session's is shared by the other kafka tests, which cannot see it restart).

The broker is one KRaft node started as the replicated managed Kafka starts each of its nodes
(:func:`mqlab.servers.kafkaha.start`), so that it restarts as a fault event restarts a node
(:class:`~mqlab.servers.nodes.ProcessNodes`): SIGTERM (a clean shutdown) or SIGKILL, then the
same command line again on its own ports and data. A file of its own: pytest-xdist
(``--dist loadfile``) gives it a worker beside the RabbitMQ restarts.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from mqlab.errors import BrokerError
from mqlab.servers import kafka, kafkaha, managed
from mqlab.servers.handle import ServerHandle
from mqlab.testing import ConformanceSuite, Subject

from .kit import node_restarts
from .test_kafka import on_kafka

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def restartable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Subject]:
    server = managed.starter("kafka")
    assert isinstance(server, kafka.KafkaServer)
    java = shutil.which("java")
    if java is None:
        pytest.fail(server.installed() or "no Java", pytrace=False)
    state_dir = tmp_path_factory.mktemp("kafka-restarted")
    try:
        kafka.JARS.fetch()
        handle: ServerHandle = kafkaha.start(server, java, state_dir, 1)
    except (BrokerError, OSError, ValueError) as exc:
        pytest.fail(f"cannot start the test Kafka broker: {exc}", pytrace=False)
    try:
        yield on_kafka(handle, restart=node_restarts(server.nodes[state_dir]))
    finally:
        server.stop(handle)


@pytest.mark.parametrize("delivery_mode", ["default", "at-most-once"])
def test_the_server_restarts_under_load(restartable: Subject, delivery_mode: str) -> None:
    ConformanceSuite().test_the_server_restarts_under_load(restartable, delivery_mode)
