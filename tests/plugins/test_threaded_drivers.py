"""What both threaded drivers (oslo.messaging's, py-amqp's) must do at the contract's edges."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mqlab_oslo import OsloTransport
from mqlab_pyamqp import PyamqpTransport

from mqlab.errors import CallTimeout, ConnectFailed
from mqlab.transport import Target, Transport, TransportConfig

from .threaded import Make, starter

pytestmark = pytest.mark.broker

DRIVERS = [OsloTransport, PyamqpTransport]


@pytest.fixture(params=DRIVERS, ids=lambda cls: cls.__name__)
async def make(request: pytest.FixtureRequest, broker: Any) -> AsyncIterator[Make]:
    async for factory in starter(broker.url, request.param):
        yield factory


async def test_a_call_nobody_serves_times_out_within_its_slack(make: Make) -> None:
    tag = uuid.uuid4().hex[:8]
    client = await make(f"{tag}-c")
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(CallTimeout):
        await client.call(Target(tag, f"{tag}-nobody"), b"x", 1.0)
    assert loop.time() - began < 1.0 + 1.0


@pytest.mark.parametrize("cls", DRIVERS, ids=lambda cls: cls.__name__)
async def test_no_broker_is_one_line_without_password(cls: type[Transport]) -> None:
    transport = cls(TransportConfig(("amqp://u:sekret@127.0.0.1:1/",), {}, "w"))
    with pytest.raises(ConnectFailed) as info:
        await transport.start()
    await transport.aclose()
    assert "sekret" not in str(info.value) and "127.0.0.1:1" in str(info.value)
