"""`mqlab compare A B`: the same steps side by side, ratios B/A, noise marked, as a user runs it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from tests import results_fixtures as fx
from tests.helpers import mqlab


def _table(markdown: str) -> list[list[str]]:
    rows = []
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) > 10 and cells[0] != "driver":
            rows.append(cells)
    return rows


def _rows(markdown: str) -> dict[str, list[str]]:
    """Markdown table rows keyed by "driver scenario load"."""
    return {f"{c[0]} {c[1]} {c[2]}": c for c in _table(markdown)}


def _compare(
    tmp_path: Path, a: dict[str, Any], b: dict[str, Any]
) -> tuple[str, dict[str, list[str]]]:
    pa, pb = fx.write(tmp_path / "a.json", a), fx.write(tmp_path / "b.json", b)
    proc = mqlab("compare", str(pa), str(pb), "--markdown")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, _rows(proc.stdout)


def test_the_same_run_twice_is_within_noise_everywhere(tmp_path: Path) -> None:
    _, rows = _compare(tmp_path, fx.schema2_run(), fx.schema2_run())
    assert len(rows) == 6
    for key, cells in rows.items():
        # msg/s, p50 and p99 ratios: every one 1.00x and within noise ...
        assert [cells[6], cells[9]] == ["1.00x (within noise)"] * 2, cells
        # ... but a p99 that failures reach is a lower bound on both sides: no test answers
        bound = key == "pika notify (notify) 1000/s"
        assert cells[12] == ("1.00x (unknown (lower bounds))" if bound else "1.00x (within noise)")


def test_a_difference_larger_than_the_spread_is_not_noise(tmp_path: Path) -> None:
    a, b = fx.schema2_run(), fx.schema2_run()
    # +20 % throughput: with a 50 msg/s stdev over 3 s Welch's t is 4.9 on 4 degrees
    # of freedom, outside the noise (t_0.975 = 2.78) ...
    b["steps"][0]["throughput"]["mean"] = 1200.0
    # ... and within it when the per-second spread is 600 msg/s
    a["steps"][2]["throughput"]["stdev"] = b["steps"][2]["throughput"]["stdev"] = 600.0
    b["steps"][2]["throughput"]["mean"] = 2200.0
    _, rows = _compare(tmp_path, a, b)
    assert rows["kombu call (call) c=5"][6] == "1.20x"
    assert rows["kombu call (call) c=25"][6] == "1.10x (within noise)"


def test_latency_noise_comes_from_the_per_second_percentiles(tmp_path: Path) -> None:
    a, b = fx.schema2_run(), fx.schema2_run()
    b["steps"][0]["latency_ms"]["p99"] = 10.0  # 9 -> 10 ms, per-second p99 spreads ±10 %
    b["steps"][1]["latency_ms"]["p99"] = 12.0  # 6 -> 12 ms: well beyond the spread
    _, rows = _compare(tmp_path, a, b)
    assert rows["kombu call (call) c=5"][12] == "1.11x (within noise)"
    assert rows["pika call (call) c=5"][12] == "2.00x"
    # schema 1 stores no per-second latency: the noise is unknown, and says so
    _, rows = _compare(tmp_path, fx.schema1_run(), fx.schema1_run())
    assert rows["kombu call (call) c=5"][12] == "1.00x (noise unknown)"


def test_steps_in_only_one_run_are_listed_as_such(tmp_path: Path) -> None:
    a, b = fx.schema2_run(), fx.schema2_run()
    del a["steps"][3]  # pika c=25 only in B
    b["steps"][4]["message_size"] = "1KiB"  # another message size: not the same step
    out, rows = _compare(tmp_path, a, b)
    assert rows["pika call (call) c=25"][4:6] == ["-", "2,600"]
    only = {(f"{c[0]} {c[1]} {c[2]}", c[3], c[-1]) for c in _table(out) if c[-1]}
    assert only == {
        ("pika call (call) c=25", "openstack", "only in B"),
        ("kombu notify (notify) 1000/s", "openstack", "only in A"),
        ("kombu notify (notify) 1000/s", "1KiB", "only in B"),
    }


def test_environment_differences_come_first(tmp_path: Path) -> None:
    a, b = fx.schema2_run(), fx.schema2_run()
    b["environment"] = fx.environment(python="3.12.4")
    b["environment"]["broker"]["version"] = "4.0.2"
    b["environment"]["codec_cost_us"] = {"json+envelope openstack": 99.0}  # measured, not env
    b["profile"]["run"]["duration"] = 20.0
    out, _ = _compare(tmp_path, a, b)
    head = out[: out.index("| driver")]
    assert "- python: 3.11.7 -> 3.12.4" in head
    assert "- broker.version: 3.12.1 -> 4.0.2" in head
    assert "- run.duration: 3.0 -> 20.0" in head
    assert "codec" not in head
    out, _ = _compare(tmp_path, a, copy.deepcopy(a))
    assert "Same environment" in out
    # where the figures were served (Prometheus) is not a difference in how they were measured
    served = copy.deepcopy(a)
    served["profile"]["run"]["metrics_port"] = 9464
    out, _ = _compare(tmp_path, a, served)
    assert "Same environment" in out


def test_repeats_compare_their_aggregates_with_the_ci95(tmp_path: Path) -> None:
    a, b = fx.schema2_run(), fx.schema2_run()
    for doc, mean, ci in ((a, 1000.0, 80.0), (b, 1040.0, 80.0)):
        doc["aggregates"] = [{"driver": "kombu", "scenario": "call", "pattern": "call",
                              "concurrency": 5, "rate": None, "repeats": 3,
                              "throughput": {"mean": mean, "ci95": ci},
                              "latency_ms": {"p50": 2.0, "p99": 9.0}}]  # fmt: skip
    _, rows = _compare(tmp_path, a, b)
    # se = 80 / t_0.975(2) = 18.6 each, t = 40 / 26.3 = 1.52 <= t_0.975(4) = 2.78: within
    # the repeats' noise; the single steps are replaced
    assert rows["kombu call (call) c=5 x3"][6] == "1.04x (within noise)"
    assert "kombu call (call) c=5" not in rows
    b["aggregates"][0]["throughput"]["mean"] = 1200.0
    _, rows = _compare(tmp_path, a, b)
    assert rows["kombu call (call) c=5 x3"][6] == "1.20x"


def test_terminal_table_marks_noise_and_shows_losses(tmp_path: Path) -> None:
    a, b = fx.schema2_run(), fx.schema2_run()
    b["steps"][1]["throughput"]["mean"] = 3000.0
    pa, pb = fx.write(tmp_path / "a.json", a), fx.write(tmp_path / "b.json", b)
    proc = mqlab("compare", str(pa), str(pb))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    pika = next(line for line in lines if "pika" in line and "c=5" in line)
    kombu = next(line for line in lines if "kombu" in line and "c=5" in line)
    assert "2.00x" in pika and "2.00x ≈" not in pika
    assert "1.00x ≈" in kombu
    assert "7 / 7" in next(line for line in lines if "pika" in line and "1000/s" in line)
    assert "≈ = within noise" in proc.stdout
