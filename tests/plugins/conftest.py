from __future__ import annotations

from collections.abc import Iterator

import pytest

from mqlab.servers.handle import ServerHandle
from tests.conftest import BrokerHandle

from .kit import Mgmt


@pytest.fixture
def mgmt(broker: BrokerHandle) -> Mgmt:
    return Mgmt(broker.management_url)


def _managed(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    """A private server of ``kind`` (its managed starter) for the session; never skipped."""
    from mqlab.errors import BrokerError
    from mqlab.servers import managed

    try:
        with managed.managed([kind], tmp_path_factory.mktemp(kind)) as handles:
            yield handles[kind]
    except BrokerError as exc:
        pytest.fail(f"cannot start the test {kind} server: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    yield from _managed("nats", tmp_path_factory)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    yield from _managed("redis", tmp_path_factory)


@pytest.fixture(scope="session")
def mosquitto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    yield from _managed("mosquitto", tmp_path_factory)


@pytest.fixture(scope="session")
def kafka_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    yield from _managed("kafka", tmp_path_factory)


@pytest.fixture(scope="session")
def artemis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    """A private ActiveMQ Artemis (a JVM): started once for the session, and gone after it."""
    import psutil

    handle: ServerHandle | None = None
    for handle in _managed("artemis", tmp_path_factory):
        yield handle
    assert handle is not None
    assert not psutil.pid_exists(handle.pids[0]), "the Artemis JVM outlived its stop"
