"""Results documents for the report and compare tests: schema 2 as issue 10 defines it.

Histograms are real HdrHistogram encodings (µs) built with ``hdrhistogram``; the
schema-1 form is the same run with every schema-2 key taken away.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

from mqlab.record import legacy
from mqlab.record.repeats import aggregate
from mqlab.record.step import StepRecord
from mqlab.record.trust import Trust
from mqlab.record.values import Flag
from mqlab.record.wire import SCHEMA, from_wire

MASKED_URL = "amqp://guest:***@127.0.0.1:5672/"


def histogram(values_us: dict[int, int]) -> str:
    """An encoded histogram holding `count` samples of each value (µs)."""
    h = HdrHistogram(1, 3_600_000_000, 3)
    for value, count in values_us.items():
        h.record_value(value, count)
    encoded: bytes = h.encode()
    return encoded.decode("ascii")


def environment(python: str = "3.11.7") -> dict[str, Any]:
    return {
        "mqlab": "0.1.0", "python": python, "implementation": "CPython", "uvloop": "0.21.0",
        "plugins": {"kombu": {"package": "mqlab-kombu", "version": "0.1.0"},
                    "pika": {"package": "mqlab-pika", "version": "0.1.0"}},
        "broker": {"managed": True, "product": "RabbitMQ", "version": "3.12.1"},
        "cpu_model": "Test CPU", "cpu_count": 2, "hostname": "lab", "platform": "Linux",
        "codec_cost_us": {"json+envelope openstack": 70.0},
    }  # fmt: skip


def step(
    index: int,
    driver: str,
    pattern: str = "call",
    concurrency: int | None = 5,
    rate: float | None = None,
    mean: float = 1000.0,
    stdev: float = 50.0,
    p50_us: int = 2000,
    p99_us: int = 9000,
    **extra: Any,
) -> dict[str, Any]:
    kind = "round_trip" if pattern == "call" else "one_way"
    sent = int(mean * 4)
    doc: dict[str, Any] = {
        "step": index, "driver": driver, "plugin": driver, "scenario": pattern,
        "pattern": pattern, "concurrency": concurrency, "rate": rate, "repeat": 0,
        "servers": 1, "targets": 1, "groups": 1, "serializer": "json", "envelope": True,
        "message_size": "openstack", "durable": False, "status": "done", "workers_lost": [],
        "sent": sent, "expected": sent, "received": sent,
        "round_trip": sent if pattern == "call" else 0, "lost": 0, "drain_s": 0.1,
        "duplicates": 0, "out_of_order": 0, "errors": {},
        "throughput": {"mean": mean, "stdev": stdev},
        "latency_ms": {"kind": kind, "p50": p50_us / 1000, "p90": p99_us / 2000,
                       "p99": p99_us / 1000, "p999": p99_us / 1000, "max": p99_us / 1000,
                       "count": 1000, "failed": 0, "failed_percent": 0.0, "censored": []},
        "histograms": {kind: histogram({p50_us: 900, p99_us: 100})},
        "cpu": {"clients_percent": 40.0, "servers_percent": 30.0, "broker_percent": 55.0,
                "workers": [{"worker": "c0", "role": "clients", "cpu_percent": 40.0,
                             "peak_rss_mb": 30.0},
                            {"worker": "s0", "role": "servers", "cpu_percent": 30.0,
                             "peak_rss_mb": 28.0}],
                "nodes": [{"node": "rabbit@lab", "cpu_percent": 55.0, "sys_percent": 9.0,
                           "rss_mb": 120.0, "series": {"cpu": [50, 55, 60], "sys": [8, 9, 10]}}]},
        "series": {"t0_offset_s": -1.0, "sent": [mean] * 4, "received": [mean] * 4,
                   "round_trip": [mean] * 4 if pattern == "call" else [], "errors": [0] * 4,
                   "p50_ms": [None, p50_us / 1000, p50_us / 1000, p50_us / 1000],
                   "p99_ms": [None, p99_us / 1000, p99_us / 1000 * 1.1, p99_us / 1000 * 0.9]},
        "open_loop": None, "flags": [], "unaccounted": 0, "still_queued": 0,
    }  # fmt: skip
    doc.update(extra)
    return doc


def schema2_run() -> dict[str, Any]:
    """pika against kombu: call at c=5 and c=25, notify open loop at 1000/s, with trouble."""
    troubled = step(
        5, "pika", "notify", None, 1000.0, mean=900.0, lost=7, duplicates=3, unaccounted=11,
        still_queued=4,
        flags=[{"code": "could_not_keep_up", "message": "could not keep up: 90% of 1000/s"}],
        open_loop={"intended": 4000, "sent": 3600, "achieved_rate": 900.0, "max_behind_ms": 40.0,
                   "not_sent": 400, "kept_up": False},
        events=[{"t_s": 1.0, "action": "kill-node", "detail": "rabbit@lab killed"}],
        faults=[{"event": "kill-node", "t_s": 1.0, "median_before": 1000.0, "detect_s": 1.0,
                 "detected_by": "error", "recover_s": None, "errors": 5, "lost": 7,
                 "duplicates": 3, "timed_out": 2, "promise": "retry = 0: no duplicates",
                 "verdict": "broken"}],
        phases=[{"name": "before", "start_s": 0.0, "end_s": 1.0},
                {"name": "after", "start_s": 1.0, "end_s": 3.0}],
    )  # fmt: skip
    troubled["latency_ms"].update(failed=20, failed_percent=2.0, censored=["p99", "p999", "max"],
                                  p99=2000.0, p999=2000.0, max=2000.0)  # fmt: skip
    steps = [
        step(0, "kombu", concurrency=5, mean=1000.0),
        step(1, "pika", concurrency=5, mean=1500.0, p99_us=6000),
        step(2, "kombu", concurrency=25, mean=2000.0),
        step(3, "pika", concurrency=25, mean=2600.0, p99_us=12000),
        step(4, "kombu", "notify", None, 1000.0, mean=1000.0),
        troubled,
    ]
    return {
        "schema": 2,
        "status": "done",
        "profile": {"path": "profiles/x.toml",
                    "run": {"name": "pika-vs-kombu", "duration": 3.0, "warmup": 1.0, "repeat": 1},
                    "broker": {"urls": [MASKED_URL], "managed": True}},
        "environment": environment(),
        "steps": steps,
    }  # fmt: skip


SCHEMA2_ONLY_STEP_KEYS = (
    "histograms", "open_loop", "flags", "unaccounted", "still_queued", "events", "phases",
    "faults",
)  # fmt: skip


def schema1_run() -> dict[str, Any]:
    doc = copy.deepcopy(schema2_run())
    doc["schema"] = 1
    for s in doc["steps"]:
        for key in SCHEMA2_ONLY_STEP_KEYS:
            s.pop(key, None)
        for key in ("kind", "failed", "failed_percent", "censored"):
            s["latency_ms"].pop(key)
        s["cpu"].pop("nodes")
        for key in ("p50_ms", "p99_ms"):
            s["series"].pop(key)
    return doc


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return path


def typed(step_doc: dict[str, Any], duration: float = 3.0) -> StepRecord:
    """A step as a schema-2 file holds it, read into the record type as the reader does."""
    doc = {"profile": {"run": {"duration": duration}}, "steps": [copy.deepcopy(step_doc)]}
    legacy.normalise(doc)
    return from_wire(StepRecord, doc["steps"][0])


def machine(contended: bool) -> tuple[dict[str, Any], ...]:
    """The environment's ``system`` facts (``mqlab system``) of a busy or a quiet machine."""
    share = "87 % of the machine over 1.0 s; run queue 6 on 2 CPUs" if contended else "3 %"
    return (
        {"what": "CPUs", "state": "2 online of 2", "off": False, "advice": ""},
        {"what": "other processes", "state": share, "off": contended,
         "advice": "at least 25 %: stop them, or run with --wait-quiet" if contended else ""},
    )  # fmt: skip


def trust(contended: bool) -> Trust:
    """A step's trust section as a busy or a quiet machine leaves it."""
    if not contended:
        return Trust(cpus=2, contended=False, unstable=False, others_percent=3.0, run_queue=0.5)
    return Trust(
        cpus=2, contended=True, unstable=False, others_percent=87.0, run_queue=6.5,
        contended_by=("other processes took 87 % of the machine", "run queue 6.5 on 2 CPUs"),
    )  # fmt: skip


def schema3_run(
    steps: list[StepRecord], contended: bool | None = None, name: str = "stored"
) -> dict[str, Any]:
    """A results file of this schema holding ``steps`` (numbered in order), its aggregates
    across repeats as the writer computes them; ``contended``: every step's trust section
    and the machine's facts (None: a file from before issue 42, with neither)."""
    numbered = []
    for i, s in enumerate(steps):
        s = dataclasses.replace(s, step=i)
        if contended is not None:
            s = dataclasses.replace(
                s, trust=trust(contended),
                flags=(*s.flags, *([Flag(code="contended", message="; ".join(
                    trust(True).contended_by))] if contended else [])),
            )  # fmt: skip
        numbered.append(s)
    env = environment()
    if contended is not None:
        env["system"] = list(machine(contended))
    return {
        "schema": SCHEMA, "status": "done",
        "profile": {"run": {"name": name, "duration": 3.0, "warmup": 1.0, "repeat": 1},
                    "broker": {"urls": [MASKED_URL]}},
        "environment": env,
        "steps": [s.to_wire() for s in numbered],
        "aggregates": [a.to_wire() for a in aggregate(numbered)],
    }  # fmt: skip
