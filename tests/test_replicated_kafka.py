"""The replicated managed Kafka (three KRaft nodes) under a node kill: the checks of
tests/test_replicated.py, in a file of its own so that the suite's workers run the
replicated brokers side by side."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_replicated import _run

pytestmark = pytest.mark.broker


def test_kafka_replicated_three_ways_loses_nothing_acked_by_all(tmp_path: Path) -> None:
    doc = _run(
        tmp_path, 3, '[drivers.kafka]\nplugin = "kafka"\nacks = "all"\nreplicas = 3', "node1"
    )
    said = doc["environment"]["servers"]["kafka"]
    assert "replication 3, min.insync.replicas 2" in said["replicated"]
    assert "page cache" in said["durable"]
