"""Shared fixtures. Broker-backed tests use ``broker``: never skipped.

``MQLAB_TEST_BROKER_URL`` (and ``MQLAB_TEST_MANAGEMENT_URL``) point the suite at
an existing RabbitMQ; otherwise the session starts a private node through
:mod:`mqlab.broker` and stops it at the end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class TestBroker:
    url: str  # amqp://guest:guest@127.0.0.1:PORT/
    management_url: str  # http://127.0.0.1:MPORT (guest/guest)
    port: int


@pytest.fixture(scope="session")
def broker() -> Iterator[TestBroker]:
    url = os.environ.get("MQLAB_TEST_BROKER_URL")
    if url:
        mgmt = os.environ.get("MQLAB_TEST_MANAGEMENT_URL", "http://127.0.0.1:15672")
        port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
        yield TestBroker(url, mgmt, port)
        return
    pytest.fail(
        "no broker: set MQLAB_TEST_BROKER_URL, or let the managed broker start one"
    )
