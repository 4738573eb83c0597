from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from mqlab.metrics import (
    Ledger,
    Recorder,
    count_ledgers,
    latency_ms,
    merge_histograms,
    new_histogram,
    throughput,
)


def test_ledger_counts_unique_duplicates_and_out_of_order(tmp_path: Path) -> None:
    led = Ledger(str(tmp_path), "s0")
    for seq in [0, 1, 2, 2, 5, 3, 3, 4]:
        led.record(0, 1, seq)
    assert led.unique == 6
    assert led.duplicates == 2
    assert led.out_of_order == 2  # 3 and 4 arrived after 5
    led.close()


def test_lost_and_cross_worker_duplicates_after_merge(tmp_path: Path) -> None:
    a = Ledger(str(tmp_path), "s0")
    b = Ledger(str(tmp_path), "s1")
    # client 1 sent 0..99; s0 got 0..59, s1 got 50..89: 50..59 twice, 90..99 lost
    for seq in range(60):
        a.record(0, 1, seq)
    for seq in range(50, 90):
        b.record(0, 1, seq)
    # client 2 sent 10, all to s1
    for seq in range(10):
        b.record(0, 2, seq)
    a.close()
    b.close()
    unique, dup = count_ledgers(str(tmp_path), {1: 100, 2: 10})
    assert unique == 90 + 10
    assert dup == 10
    lost = (100 + 10) - unique
    assert lost == 10


def test_groups_count_separately(tmp_path: Path) -> None:
    # two notification pools: each must receive every message once
    led = Ledger(str(tmp_path), "w")
    for seq in range(20):
        led.record(0, 1, seq)
    for seq in range(15):
        led.record(1, 1, seq)
    led.close()
    unique, dup = count_ledgers(str(tmp_path), {1: 20})
    assert (2 * 20 - unique, dup) == (5, 0)


def test_ledger_survives_the_worker(tmp_path: Path) -> None:
    # receipts are in a shared file mapping: a killed worker's are still counted
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        led = Ledger(str(tmp_path), "s0")
        for seq in range(1000):
            led.record(0, 3, seq)
        os._exit(0)  # no close, no flush: as abrupt as a kill
    os.waitpid(pid, 0)
    assert count_ledgers(str(tmp_path), {3: 1000}) == (1000, 0)


def test_histograms_merge_by_adding_not_averaging() -> None:
    rng = random.Random(1)
    fast = [rng.randint(100, 200) for _ in range(9000)]
    slow = [rng.randint(50_000, 60_000) for _ in range(1000)]
    h1, h2 = new_histogram(), new_histogram()
    for v in fast:
        h1.record_value(v)
    for v in slow:
        h2.record_value(v)
    merged = merge_histograms([h1.encode(), h2.encode()])
    lat = latency_ms(merged)
    assert lat["count"] == 10_000
    # p50 sits among the fast ones, p99 among the slow ones: averaging the two
    # workers' p99s (0.2 ms and 60 ms) would say 30 ms
    assert lat["p50"] is not None and lat["p50"] < 0.25
    assert lat["p99"] is not None and 50 < lat["p99"] < 61
    assert latency_ms(new_histogram())["p99"] is None


def test_throughput_mean_and_variance_over_window_bins() -> None:
    series = [999, 10, 20, 30, 999]  # warm-up bin, 3 window bins, drain bin
    t = throughput(series, 1, 4)
    assert t["mean"] == 20.0
    assert t["stdev"] == pytest.approx(8.16, abs=0.01)
    # not one whole second measured: no figure rather than a false zero
    assert throughput(series, 1, 1) == {"mean": None, "stdev": None}


def test_recorder_excludes_warmup_from_latency(tmp_path: Path) -> None:
    import time

    rec = Recorder(str(tmp_path), "w")
    now = time.monotonic_ns()
    rec.open(now - 2_000_000_000, now - 1_000_000_000, now + 10_000_000_000)
    rec.on_received(0, 1, 0, now - 1_500_000_000)  # intended during warm-up
    rec.on_received(0, 1, 1, now - 1_000)  # inside the window
    snap = rec.snapshot()
    assert snap["received"] == 2
    assert rec.hist.get_total_count() == 1
    assert snap["hist"]
    rec.ledger.close()
