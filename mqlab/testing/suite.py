"""ConformanceSuite: the kit's checks as pytest tests, for a plugin author to subclass.

::

    from mqlab.testing import ConformanceSuite, Subject

    class TestMyBus(ConformanceSuite):
        @pytest.fixture
        def subject(self) -> Subject:
            return Subject("mybus", urls=("mybus://127.0.0.1:4222",))

Each test runs one check on its own event loop (no pytest-asyncio needed).
"""

from __future__ import annotations

from typing import Any

import pytest

from mqlab.testing import ceiling, delivery, lifecycle, resilience, restart
from mqlab.testing.kit import run
from mqlab.testing.subject import Subject


class ConformanceSuite:
    """The transport contract, checked. Override the ``subject`` fixture."""

    @pytest.fixture
    def subject(self) -> Subject:
        raise NotImplementedError(
            f"{type(self).__name__}: override the 'subject' fixture to return a Subject"
        )

    def test_call(self, subject: Subject) -> None:
        run(delivery.call, subject)

    def test_cast(self, subject: Subject) -> None:
        run(delivery.cast, subject)

    def test_casts_as_the_core_sends_them(self, subject: Subject) -> None:
        run(delivery.casts_as_the_core_sends_them, subject)

    def test_notify(self, subject: Subject) -> None:
        run(delivery.notify, subject)

    def test_servers_of_a_topic_share_its_casts(self, subject: Subject) -> None:
        run(delivery.servers_share_casts, subject)

    def test_every_pool_gets_every_notification(self, subject: Subject) -> None:
        run(delivery.every_pool_gets_every_notification, subject)

    def test_fanout_cast_reaches_every_server(self, subject: Subject) -> None:
        run(delivery.fanout_reaches_every_server, subject)

    def test_each_cast_goes_where_its_target_says(self, subject: Subject) -> None:
        run(delivery.each_cast_goes_where_its_target_says, subject)

    def test_targeted_call_reaches_the_named_server(self, subject: Subject) -> None:
        run(delivery.targeted_call_reaches_the_named_server, subject)

    def test_call_nobody_listens_to(self, subject: Subject) -> None:
        run(delivery.call_to_nobody, subject)

    def test_quorum_queues(self, subject: Subject) -> None:
        run(delivery.quorum_queues, subject)

    def test_one_mib_messages_arrive_intact(self, subject: Subject) -> None:
        run(delivery.large_messages, subject)

    @pytest.mark.parametrize("delivery_mode", ["default", "at-most-once"])
    def test_100_concurrent_senders_lose_nothing(
        self, subject: Subject, delivery_mode: str
    ) -> None:
        options = _mode_options(subject, delivery_mode)

        async def check(subject: Subject) -> None:
            await delivery.concurrent_senders(subject, options)

        run(check, subject)

    @pytest.mark.parametrize("delivery_mode", ["default", "at-most-once"])
    def test_reference_loop(self, subject: Subject, delivery_mode: str) -> None:
        """The loop `mqlab ceiling` runs beside each cast step, in each ack mode."""
        if not subject.ceiling:
            pytest.skip(f"{subject.name}: Subject(ceiling=False), no library to measure")
        options = _mode_options(subject, delivery_mode)

        async def check(subject: Subject) -> None:
            await ceiling.reference_loop(subject, options)

        run(check, subject)

    def test_reference_loop_with_its_consumer_stopped_first(self, subject: Subject) -> None:
        """The publisher of the loop still stops when its consumer has gone first."""
        if not subject.ceiling:
            pytest.skip(f"{subject.name}: Subject(ceiling=False), no library to measure")

        async def check(subject: Subject) -> None:
            await ceiling.reference_loop(subject, consumer_first=True)

        run(check, subject)

    def test_idle_connections_still_work(self, subject: Subject) -> None:
        run(resilience.idle_then_send, subject)

    @pytest.mark.parametrize("delivery_mode", ["default", "at-most-once"])
    def test_a_dropped_connection_is_told_and_not_reused(
        self, subject: Subject, delivery_mode: str
    ) -> None:
        options = _mode_options(subject, delivery_mode)
        at_most_once = delivery_mode == "at-most-once"

        async def check(subject: Subject) -> None:
            await resilience.dropped_connection(subject, options, at_most_once)

        run(check, subject)

    @pytest.mark.parametrize("delivery_mode", ["default", "at-most-once"])
    def test_the_server_restarts_under_load(self, subject: Subject, delivery_mode: str) -> None:
        options = _mode_options(subject, delivery_mode)

        async def check(subject: Subject) -> None:
            await restart.restart_under_load(subject, options)

        run(check, subject, limit=120.0)

    def test_mandatory_after_the_server_is_killed(self, subject: Subject) -> None:
        run(restart.mandatory_after_a_kill, subject, limit=120.0)

    def test_clean_close(self, subject: Subject) -> None:
        run(lifecycle.clean_close, subject)

    def test_a_clean_close_keeps_what_is_queued_for_a_durable_pool(self, subject: Subject) -> None:
        run(lifecycle.durable_close, subject)

    def test_connect_failure(self, subject: Subject) -> None:
        run(lifecycle.connect_failure, subject)

    def test_refused_options(self, subject: Subject) -> None:
        run(lifecycle.refused_options, subject)


def _mode_options(subject: Subject, delivery_mode: str) -> dict[str, Any]:
    """The options a check adds for ``delivery_mode``; skips at-most-once where undeclared."""
    if delivery_mode != "at-most-once":
        return {}
    if not subject.load().cls.features.at_most_once:
        pytest.skip(f"{subject.name} does not declare Features.at_most_once")
    return dict(subject.at_most_once_options)
