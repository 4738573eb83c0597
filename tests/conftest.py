"""Shared fixtures. Broker-backed tests use ``broker``: never skipped.

``MQLAB_TEST_BROKER_URL`` (and ``MQLAB_TEST_MANAGEMENT_URL``, ``MQLAB_TEST_METRICS_URL``:
its rabbitmq_prometheus endpoint) point the suite at
an existing RabbitMQ; otherwise the session starts a private node through
:mod:`mqlab.rabbitmq` and stops it at the end.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class BrokerHandle:
    url: str  # amqp://guest:guest@127.0.0.1:PORT/
    management_url: str  # http://127.0.0.1:MPORT (guest/guest)
    port: int
    metrics_url: str = ""  # http://127.0.0.1:PPORT/metrics (rabbitmq_prometheus)


#: the session broker, once a test asked for it
_STARTED: list[BrokerHandle] = []
#: exchanges every scenario shares by default (mqlab's notify default, oslo's control
#: exchange): a durable step declares them durable, and a non-durable one in another file is
#: then refused (PRECONDITION_FAILED): test files share a broker and run in any order
_SHARED_DEFAULTS = ("notifications", "openstack")


@pytest.fixture(autouse=True, scope="module")
def _fresh_default_exchanges() -> Iterator[None]:
    """Each test file leaves the session broker's default exchanges as it found them: absent."""
    yield
    from mqlab.testing.rabbitmq import RabbitMQ

    for handle in _STARTED:
        api = RabbitMQ(handle.management_url)
        for name in _SHARED_DEFAULTS:
            with contextlib.suppress(OSError):  # a test stopped the broker: nothing to keep
                api.delete("exchanges", name)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerHandle]:
    url = os.environ.get("MQLAB_TEST_BROKER_URL")
    if url:
        mgmt = os.environ.get("MQLAB_TEST_MANAGEMENT_URL", "http://127.0.0.1:15672")
        port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
        metrics = os.environ.get("MQLAB_TEST_METRICS_URL", "http://127.0.0.1:15692/metrics")
        _STARTED.append(BrokerHandle(url, mgmt, port, metrics))
        yield _STARTED[-1]
        return
    # Managed mode: a private node on free loopback ports, data in a tmp dir.
    with private_node(tmp_path_factory.mktemp("broker")) as handle:
        _STARTED.append(handle)
        yield handle


@contextlib.contextmanager
def private_node(state_dir: Path) -> Iterator[BrokerHandle]:
    """A private RabbitMQ node (:mod:`mqlab.rabbitmq`) with its data in ``state_dir``,
    stopped at the end; a node that cannot start fails the test (never skips it)."""
    from mqlab import rabbitmq as managed
    from mqlab.errors import BrokerError

    problem = managed.installed()
    if problem:
        pytest.fail(f"{problem} (or set MQLAB_TEST_BROKER_URL to a running broker)", pytrace=False)
    try:
        node = managed.start(state_dir)
    except BrokerError as exc:
        pytest.fail(f"cannot start the test broker: {exc}", pytrace=False)
    try:
        yield BrokerHandle(node.url, node.management_url, node.port, node.prometheus_url or "")
    finally:
        managed.stop(state_dir)
