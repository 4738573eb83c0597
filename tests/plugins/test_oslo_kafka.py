"""oslo.messaging's kafka driver (notifications only) on the session's private Kafka broker.

The conformance kit's checks that apply to a notify-only driver, one by one (its call and
cast checks do not apply, and oslo's kafka driver has no cast for a reference loop).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient
from mqlab_oslo.kafka import OsloKafkaTransport

from mqlab.servers.handle import ServerHandle
from mqlab.testing import Kit, Recorder, Subject, delivery, lifecycle, resilience
from mqlab.testing.kit import Check, run
from mqlab.transport import PATTERNS


def kafka_groups(url: str) -> Callable[[str], list[str]]:
    """Consumer groups naming the tag: the pools of listeners that closed."""
    hosts = url.removeprefix("kafka://")

    def leftovers(tag: str) -> list[str]:
        listed = AdminClient({"bootstrap.servers": hosts}).list_consumer_groups().result(10)
        return [f"group {g.group_id}" for g in listed.valid if tag in g.group_id]

    return leftovers


@pytest.fixture
def subject(kafka_server: ServerHandle) -> Subject:
    return Subject(
        "oslo-kafka",
        urls=kafka_server.urls,
        bad_options={"threads": 0, "partitions": 0, "linger_ms": -1},
        leftovers=kafka_groups(kafka_server.urls[0]),
        arrival=15.0,
    )


def test_it_declares_notify_alone() -> None:
    assert OsloKafkaTransport.patterns() == frozenset({"notify"})
    assert set(PATTERNS) - OsloKafkaTransport.patterns() == {"call", "cast"}


@pytest.mark.parametrize(
    "check",
    [
        delivery.notify,
        delivery.every_pool_gets_every_notification,
        lambda subject: delivery.concurrent_senders(subject, {}),
        resilience.idle_then_send,
        lifecycle.clean_close,
        lifecycle.connect_failure,
        lifecycle.refused_options,
    ],
    ids=["notify", "pools", "100-senders", "idle", "clean-close", "connect-failure", "options"],
)
def test_the_kit(subject: Subject, check: Check) -> None:
    run(check, subject, limit=90.0)


def test_a_notification_above_librdkafkas_limit_is_logged_and_dropped_not_raised(
    subject: Subject, caplog: pytest.LogCaptureFixture
) -> None:
    """oslo sets no message.max.bytes: librdkafka's 1,000,000 bytes (a record, with oslo's
    JSON envelope) is the limit, and oslo logs what it refuses; notify() still returns."""

    async def check(subject: Subject) -> None:
        async with Kit(subject) as kit:
            listener, client = await kit.transport("listener"), await kit.transport("client")
            heard = Recorder()
            await listener.serve_notifications(kit.events(), kit.pool("pool"), heard)
            await client.notify(kit.events(), b"n" * 1_000_000)  # returns: nothing raised
            await client.notify(kit.events(), b"small")
            await kit.settle(lambda: len(heard), 1)
            assert heard.bodies == [b"small"]

    run(check, subject, limit=90.0)
    assert any("Message size too large" in r.getMessage() for r in caplog.records)
