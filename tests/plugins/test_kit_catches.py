"""Each of the kit's checks that a newcomer's plugin slipped past fails on a deliberately
broken copy of a real plugin: the broken behaviour is named in each copy's docstring."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

import greenstalk
import msgpack
import pytest
from mqlab_aiormq.reference import AiormqReference
from mqlab_aiormq.transport import AiormqTransport
from mqlab_beanstalk import LOST, BeanstalkTransport, _client
from mqlab_pyamqp.reference import PyamqpReference

from mqlab.sdk import amqp
from mqlab.sdk.reference import Tally
from mqlab.servers.handle import ServerHandle
from mqlab.testing import RabbitMQ, Subject, ceiling, lifecycle, resilience, restart, run
from mqlab.transport import Handler, TransportConfig
from tests.conftest import BrokerHandle

from .test_beanstalk_example import beanstalkd, on_beanstalkd  # noqa: F401 - the fixture

# -- beanstalkd: calls after a drop, a restart under load, mandatory after a kill -------------


class KeepsADeadReplyConnection(BeanstalkTransport):
    """Opens its reply reader's connection at start, reads it from the first call on, and
    on an error reads the same connection again: a client that had made no call before a
    drop waits for replies on a dead connection."""

    async def start(self) -> None:
        await super().start()
        self.reply_client = await asyncio.to_thread(_client, self.url, 5.0)
        await asyncio.to_thread(self.reply_client.watch, self.replies.address)

    async def _consume(self, names: list[str], handler: Handler | None, ready: Any) -> None:
        if handler is not None:
            return await super()._consume(names, handler, ready)
        ready.set_result(None)
        while True:
            try:
                job = await asyncio.to_thread(self.reply_client.reserve, 1)
            except greenstalk.TimedOutError:
                continue
            except LOST:
                await asyncio.sleep(0.1)  # and the dead connection again
                continue
            self.replies.resolve(msgpack.unpackb(job.body)[2], msgpack.unpackb(job.body)[3])
            await asyncio.to_thread(self.reply_client.delete, job)

    async def aclose(self) -> None:
        await super().aclose()
        if hasattr(self, "reply_client"):
            self.reply_client.close()


def test_a_reply_reader_on_a_connection_the_drop_killed_fails_the_drop_check(
    beanstalkd: ServerHandle,  # noqa: F811
) -> None:
    subject = on_beanstalkd(beanstalkd, KeepsADeadReplyConnection, arrival=4.0)
    with pytest.raises(AssertionError, match="had made no call before the drop got no reply"):

        async def check(subject: Subject) -> None:
            await resilience.dropped_connection(subject, {})

        run(check, subject)


class LetsTheLibraryErrorOut(BeanstalkTransport):
    """Sends with no error rule and no retry: greenstalk's socket error leaves the cast."""

    async def _put(self, prefix: str, only: str, message: list[Any]) -> int:
        data = msgpack.packb(message)
        return await self.senders.run(self._put_now, prefix, only, data)


def test_a_library_error_during_a_restart_fails_the_restart_check(
    beanstalkd: ServerHandle,  # noqa: F811
) -> None:
    subject = on_beanstalkd(beanstalkd, LetsTheLibraryErrorOut, arrival=5.0)
    with pytest.raises(AssertionError, match="a library error no rule maps"):

        async def check(subject: Subject) -> None:
            await restart.restart_under_load(subject, {})

        run(check, subject, limit=120.0)


class ForgetsMandatoryOnANewConnection(BeanstalkTransport):
    """A sending connection opened after a lost one puts without asking whether the tube is
    served: after the server's crash, casts and calls to nobody are accepted."""

    def _sender(self) -> Any:
        if getattr(self.local, "client", None) is None:
            self.local.opened = getattr(self.local, "opened", 0) + 1
        return super()._sender()

    def _put_now(self, prefix: str, only: str, data: bytes) -> int:
        if only and getattr(self.local, "opened", 0) > 1:
            self._put_in(only, data)
            return 1
        return super()._put_now(prefix, only, data)


def test_mandatory_forgotten_after_a_kill_fails_the_kill_check(
    beanstalkd: ServerHandle,  # noqa: F811
) -> None:
    subject = on_beanstalkd(beanstalkd, ForgetsMandatoryOnANewConnection, options={"senders": 1})
    with pytest.raises(AssertionError, match="after the kill and restart"):
        run(restart.mandatory_after_a_kill, subject, limit=120.0)


# -- RabbitMQ: a durable pool across a close, bad combinations, reference loops -------------


def _aiormq(broker: BrokerHandle, transport: Any = "aiormq", **kw: Any) -> Subject:
    mgmt = RabbitMQ(broker.management_url)
    return Subject(transport, urls=(broker.url,), leftovers=mgmt.leftovers, drop=mgmt.drop, **kw)


class NotesDurableQueuesToo(amqp.Declared):
    def queue(self, decl: amqp.QueueDecl) -> None:
        self._queues[decl.name] = None


class DeletesADurablePool(AiormqTransport):
    """Deletes every queue it declared at close, durable ones too: what was still queued
    for a durable pool's next listener goes with it."""

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self._created = NotesDurableQueuesToo()


def test_a_close_that_deletes_a_durable_pool_fails_the_durable_close_check(
    broker: BrokerHandle,
) -> None:
    subject = _aiormq(broker, DeletesADurablePool, arrival=3.0)
    with pytest.raises(AssertionError, match="queued while the pool's listener was closed"):
        run(lifecycle.durable_close, subject)


class ChecksOptionsOneByOne(AiormqTransport):
    """Has no check_combinations: no_ack with multi_ack 2 is accepted, and acks nothing."""

    @classmethod
    def check_combinations(cls, options: Mapping[str, Any]) -> None:
        pass


def test_a_bad_combination_accepted_fails_the_options_check(broker: BrokerHandle) -> None:
    subject = _aiormq(
        broker, ChecksOptionsOneByOne, bad_combinations=[{"no_ack": True, "multi_ack": 2}]
    )
    with pytest.raises(AssertionError, match="accepted the options no_ack=True, multi_ack=2"):
        run(lifecycle.refused_options, subject)


class WaitsForItsConsumer(AiormqReference):
    """The publisher waits, once stopped, until its consumer has read everything: with the
    consumer gone first (its queue deleted with it), for ever."""

    async def apublish(self, tally: Tally) -> None:
        await super().apublish(tally)
        while True:  # "the queue is gone for now": look again
            await asyncio.sleep(0.1)


def test_a_publisher_waiting_for_a_gone_consumer_fails_the_consumer_first_check(
    broker: BrokerHandle,
) -> None:
    subject = _aiormq(broker, reference=f"{__name__}:WaitsForItsConsumer")
    with pytest.raises(AssertionError, match=r"(?s)consumer stopped first\) failed.*in apublish"):

        async def check(subject: Subject) -> None:
            await ceiling.reference_loop(subject, consumer_first=True)

        run(check, subject, limit=120.0)


class HangsInALibraryCall(PyamqpReference):
    """The publisher never returns from a blocking call once stopped."""

    def publish(self, tally: Tally) -> None:
        super().publish(tally)
        threading.Event().wait()  # a library call that never returns


def test_a_hung_loop_is_shown_with_its_stack(broker: BrokerHandle) -> None:
    """Before: "the publisher did not report within 17 s", with an empty stderr."""
    subject = _aiormq(broker, "pyamqp", reference=f"{__name__}:HangsInALibraryCall")
    with pytest.raises(AssertionError) as failed:
        run(ceiling.reference_loop, subject, limit=120.0)
    shown = str(failed.value)
    assert "the publisher did not report" in shown and "stacks follow" in shown, shown
    assert "in publish" in shown and "test_kit_catches.py" in shown, shown
