"""`mqlab run --metrics-port`: Prometheus metrics while a real run lasts, and the broker's beside.

A short pika run against a managed RabbitMQ node: the test scrapes mqlab's endpoint during
the run and after it (``--metrics-linger``), and the node's own ``rabbitmq_prometheus``
endpoint; the counters must say what the results file says.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import ROOT, mqlab, write_profile

PROFILE = """
[run]
name = "metrics-e2e"
duration = "2s"
warmup = "500ms"
drain = "5s"

[broker]
managed = true

[drivers.pika]
plugin = "pika"

[[scenario]]
pattern = "cast"
concurrency = [2, 4]
"""

LOOPBACK = """
[run]
name = "metrics-port"
duration = "1s"
warmup = "200ms"

[drivers.lb]
plugin = "loopback"

[[scenario]]
pattern = "cast"
concurrency = [1]
"""


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of an endpoint by its name: [(labels, value)]."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def by_step(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> dict[str, float]:
    return {labels["step"]: value for labels, value in samples.get(name, ())}


class _Lines:
    """A process's stderr read line by line in a thread, so it never blocks on a full pipe."""

    def __init__(self, stream: Any) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.lines.append(line)

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines:
                m = re.search(pattern, line)
                if m:
                    return m
            time.sleep(0.1)
        pytest.fail(f"no line matching {pattern!r} in:\n{''.join(self.lines)}", pytrace=False)


def _status(path: Path) -> dict[str, Any] | None:
    try:
        doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return doc
    except (OSError, ValueError):
        return None


@pytest.mark.broker
def test_counters_during_and_after_a_real_run_agree_with_the_results_file(tmp_path: Path) -> None:
    profile = write_profile(tmp_path / "p.toml", PROFILE)
    out = tmp_path / "run.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqlab.console.cli", "run", str(profile), "-o", str(out),
         "--metrics-port", "0", "--metrics-linger", "120s", "--state-dir", str(tmp_path / "s")],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    try:
        err = _Lines(proc.stderr)
        endpoints = r"^metrics: mqlab (http://\S+/metrics), rabbitmq (\S+) (http://\S+)$"
        line = err.wait_for(endpoints, 60)
        mqlab_url, node, rabbit_url = line.group(1), line.group(2), line.group(3)
        # loopback unless told otherwise, for mqlab and for the broker alike
        assert mqlab_url.startswith("http://127.0.0.1:")
        assert rabbit_url.startswith("http://127.0.0.1:") and node.startswith("mqlab-")

        # during the run: a step is running and its counters move
        live = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and live is None:
            samples = scrape(mqlab_url)
            running = [lb["step"] for lb, v in samples.get("mqlab_step_running", ()) if v == 1]
            sent = by_step(samples, "mqlab_sent_messages_total")
            if running and sent.get(running[0], 0) > 0:
                live = samples
            time.sleep(0.2)
        assert live is not None, "never saw a running step with messages sent"
        step = next(lb for lb, v in live["mqlab_step_running"] if v == 1)
        assert step["driver"] == "pika" and step["plugin"] == "pika"
        assert step["pattern"] == "cast" and step["load"] in ("c=2", "c=4")
        assert step["run"] == "metrics-e2e"
        # loss is known only after the drain: a running step has none yet
        assert step["step"] not in by_step(live, "mqlab_lost_messages_total")
        # the broker's own endpoint, scraped while it carries the run's messages
        broker = scrape(rabbit_url)
        assert "rabbitmq_build_info" in broker and "rabbitmq_queue_messages_ready" in broker

        # after the run: every step's final counters, while the exporter lingers
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            doc = _status(out)
            if doc is not None and doc["status"] != "running":
                break
            time.sleep(0.3)
        err.wait_for(r"^metrics: serving the final figures", 30)
        doc = _status(out)
        assert doc is not None and doc["status"] == "done", doc and doc["status"]
        final = scrape(mqlab_url)
        steps = {str(s["step"] + 1): s for s in doc["steps"]}
        assert len(steps) == 2
        for metric, key in (
            ("mqlab_sent_messages_total", "sent"),
            ("mqlab_received_messages_total", "received"),
            ("mqlab_lost_messages_total", "lost"),
            ("mqlab_duplicated_messages_total", "duplicates"),
        ):
            assert by_step(final, metric) == {k: float(s[key]) for k, s in steps.items()}, metric
        assert all(s["sent"] > 0 for s in steps.values())
        means = by_step(final, "mqlab_throughput_mean_messages_per_second")
        assert means == {k: s["throughput"]["mean"] for k, s in steps.items()}
        # the histogram holds every latency the step's HdrHistogram holds
        counts = {
            lb["step"]: v
            for lb, v in final["mqlab_latency_seconds_count"]
            if lb["kind"] == "one_way"
        }
        assert counts == {k: float(s["latency_ms"]["count"]) for k, s in steps.items()}
        assert ({"state": "finished", "run": "metrics-e2e"}, 2.0) in final["mqlab_run_steps"]
        assert not any(v for _, v in final["mqlab_step_running"])
        proc.send_signal(signal.SIGINT)  # ends the linger
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            mqlab("broker", "stop", "--state-dir", str(tmp_path / "s"))  # what it left running


def test_a_taken_metrics_port_is_one_line_and_exit_2_before_anything_runs(tmp_path: Path) -> None:
    profile = write_profile(tmp_path / "p.toml", LOOPBACK)
    out = tmp_path / "run.json"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = mqlab("run", str(profile), "-o", str(out), "--metrics-port", str(port))
    assert proc.returncode == 2
    assert proc.stderr.startswith("mqlab: metrics: 127.0.0.1:") and "is taken" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not out.exists()  # nothing started, nothing written


def test_a_metrics_port_out_of_range_or_a_host_without_a_port_is_refused(tmp_path: Path) -> None:
    bad = write_profile(tmp_path / "bad.toml", LOOPBACK + "")
    bad.write_text(LOOPBACK.replace('warmup = "200ms"', 'warmup = "200ms"\nmetrics_port = 70000'))
    proc = mqlab("run", str(bad), "-o", str(tmp_path / "r.json"))
    assert proc.returncode == 2 and "metrics_port" in proc.stderr, proc.stderr
    proc = mqlab("run", str(bad), "-o", str(tmp_path / "r.json"), "--metrics-port", "65536")
    assert proc.returncode == 2 and "--metrics-port" in proc.stderr, proc.stderr
    good = write_profile(tmp_path / "good.toml", LOOPBACK)
    proc = mqlab("run", str(good), "-o", str(tmp_path / "r.json"), "--metrics-host", "0.0.0.0")
    assert proc.returncode == 2 and "--metrics-host needs a port" in proc.stderr, proc.stderr
    assert not (tmp_path / "r.json").exists()


def test_the_latency_histogram_puts_each_hdr_value_in_its_bucket() -> None:
    from mqlab.live.exporter import buckets
    from tests.results_fixtures import histogram

    # 150 µs x10, 2 ms x5, 40 s x1 (µs, HdrHistogram's 3 significant digits)
    cumulative, total_s, count = buckets(histogram({150: 10, 2000: 5, 40_000_000: 1}))
    le = dict(cumulative)
    assert (le["0.0001"], le["0.00025"], le["0.001"], le["0.0025"]) == (0, 10, 10, 15)
    assert (le["30"], le["60"], le["+Inf"], count) == (15, 16, 16, 16)
    assert abs(total_s - (10 * 150e-6 + 5 * 2e-3 + 40.0)) < 0.05  # within HDR's precision


def test_a_step_keeps_its_series_from_running_to_finished_and_gets_its_loss_at_the_end() -> None:
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from mqlab.live.exporter import Exporter
    from mqlab.live.snapshot import RunSnapshot, StepRow
    from tests.results_fixtures import step, typed

    exporter = Exporter("r", "r.json", 1)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)

    def samples() -> dict[str, float]:
        text = generate_latest(registry).decode()
        return {
            line.split("{")[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line and not line.startswith("#") and 'step="1"' in line and "_bucket" not in line
        }

    live = typed(step(0, "pika", lost=40))  # in flight while it runs, not lost
    row = StepRow(index=0, driver="pika", pattern="call", load="c=5", phase="measuring",
                  rate_now=900.0)  # fmt: skip
    exporter.snapshot(RunSnapshot("r", 1, 1, 1.0, 10.0, "none", current=row, record=live))
    during = samples()
    assert during["mqlab_sent_messages_total"] == live.figures.sent
    assert (
        during["mqlab_step_running"] == 1 and during["mqlab_throughput_messages_per_second"] == 900
    )
    assert "mqlab_lost_messages_total" not in during
    # the step is over but its final record is not there yet: its series stay
    exporter.snapshot(RunSnapshot("r", 1, 1, 2.0, 10.0, "none"))
    between = samples()
    assert (
        between["mqlab_sent_messages_total"] == live.figures.sent
        and between["mqlab_step_running"] == 0
    )
    assert "mqlab_throughput_messages_per_second" not in between
    final = typed(step(0, "pika", lost=3))
    exporter.step(final)
    after = samples()
    assert after["mqlab_lost_messages_total"] == 3
    assert after["mqlab_throughput_mean_messages_per_second"] == final.figures.throughput.mean
