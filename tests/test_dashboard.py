"""dashboards/mqlab.json: every query names a metric mqlab or a managed RabbitMQ really exports.

mqlab's names come from its own exporter's exposition; RabbitMQ's from the session broker's
``rabbitmq_prometheus`` endpoint, scraped. A renamed metric on either side fails here,
not on an operator's empty panel.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import promql_parser
import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from mqlab.live.exporter import Exporter
from tests import results_fixtures as fx
from tests.conftest import BrokerHandle
from tests.helpers import ROOT

pytestmark = pytest.mark.broker

DASHBOARD = ROOT / "dashboards" / "mqlab.json"
# Grafana's variables, given values a parser accepts
_VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$run": "x"}
# in the text format a histogram's TYPE line names its base; a counter's its samples
_SUFFIXES = {"histogram": ("_bucket", "_count", "_sum")}


def names_in(text: str) -> set[str]:
    """Every sample name an exposition holds or declares, as Prometheus stores them: the text's
    own names (prometheus_client's parser would rename a counter without ``_total``), and
    those of a family declared with no sample yet (an error kind that has not happened)."""
    typed: dict[str, str] = {}
    samples: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            typed[name] = kind
        elif line and not line.startswith("#"):
            samples.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    out = set(samples)
    for name, kind in typed.items():
        suffixes = _SUFFIXES.get(kind, ("",))
        if not any(n == name or n.startswith(name + "_") for n in samples):
            out.update(f"{name}{s}" for s in suffixes)
    return out


def mqlab_names() -> set[str]:
    exporter = Exporter("fixture", "r.json", 3)
    for record in fx.schema2_run()["steps"]:
        exporter.step(fx.typed(record))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)
    return names_in(generate_latest(registry).decode())


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, query) for every panel target and every templating query."""
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            yield panel["title"], target["expr"]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            yield f"variable {var['name']}", var["definition"]


def metric_names(query: str) -> list[str]:
    m = re.fullmatch(r"label_values\((\w+),\s*\w+\)", query)
    if m:  # Grafana's own function, not PromQL
        return [m.group(1)]
    for var, value in _VARIABLES.items():
        query = query.replace(var, value)
    found: list[str] = []

    def visit(expr: Any) -> bool:
        if isinstance(expr, promql_parser.VectorSelector):
            found.append(expr.name or "")
        return True

    promql_parser.walk(promql_parser.parse(query), visit)
    return found


def test_every_dashboard_query_names_a_metric_mqlab_or_rabbitmq_exports(
    broker: BrokerHandle,
) -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert broker.metrics_url, "the test broker has no rabbitmq_prometheus endpoint"
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as r:
        rabbitmq = names_in(r.read().decode())
    mqlab = mqlab_names()
    seen: dict[str, set[str]] = {"mqlab": set(), "rabbitmq": set()}
    for title, query in queries(dashboard):
        names = metric_names(query)
        assert names, f"{title}: {query!r} names no metric"
        for name in names:
            assert name, f"{title}: {query!r} selects by labels only"
            side = "mqlab" if name in mqlab else "rabbitmq" if name in rabbitmq else None
            assert side, f"{title}: {name} is exported by neither mqlab nor RabbitMQ"
            seen[side].add(name)
    # one screen for both: the load's figures and the broker's
    assert {
        "mqlab_sent_messages_total",
        "mqlab_lost_messages_total",
        "mqlab_latency_seconds_bucket",
        "mqlab_process_cpu_percent",
    } <= seen["mqlab"]
    assert {
        "rabbitmq_queue_messages_ready",
        "rabbitmq_global_messages_delivered_total",
        "rabbitmq_alarms_memory_used_watermark",
        "erlang_vm_statistics_runtime_milliseconds",
    } <= seen["rabbitmq"]
