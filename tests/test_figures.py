from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from mqlab.measure import latency
from mqlab.measure.figures import WorkerFigures
from mqlab.measure.ledger import Ledger, count_ledgers, sent_at_least
from mqlab.run.stepresult import throughput
from mqlab.worker.recorder import Recorder


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


def test_a_killed_clients_sends_are_at_least_what_servers_received(tmp_path: Path) -> None:
    # client 3 was killed after reporting 995 sends; the servers got 0..1002
    led = Ledger(str(tmp_path), "s0")
    for seq in range(1003):
        led.record(0, 3, seq)
    led.close()
    reported = {3: 995, 4: 10}
    # its report alone would drop the last receipts: received could never exceed sent
    assert count_ledgers(str(tmp_path), reported) == (995, 0)
    floor = sent_at_least(str(tmp_path), reported, {3})
    assert floor == {3: 1003, 4: 10}
    assert count_ledgers(str(tmp_path), floor) == (1003, 0)


def test_histograms_merge_by_adding_not_averaging() -> None:
    rng = random.Random(1)
    fast = [rng.randint(100, 200) for _ in range(9000)]
    slow = [rng.randint(50_000, 60_000) for _ in range(1000)]
    h1, h2 = latency.new_histogram(), latency.new_histogram()
    for v in fast:
        h1.record_value(v)
    for v in slow:
        h2.record_value(v)
    merged = latency.merge([latency.encode(h1), latency.encode(h2)])
    lat = latency.summary(merged, 0, "one_way", 10.0)
    assert lat["count"] == 10_000
    # p50 sits among the fast ones, p99 among the slow ones: averaging the two
    # workers' p99s (0.2 ms and 60 ms) would say 30 ms
    assert lat["p50"] is not None and lat["p50"] < 0.25
    assert lat["p99"] is not None and 50 < lat["p99"] < 61
    assert latency.summary(latency.new_histogram(), 0, "one_way", 10.0)["p99"] is None


def test_throughput_mean_and_variance_over_window_bins() -> None:
    series = [999, 10, 20, 30, 999]  # warm-up bin, 3 window bins, drain bin
    t = throughput(series, 1, 3)
    assert t.mean == 20.0 and t.seconds == 3
    assert t.stdev == pytest.approx(8.16, abs=0.01)
    # not one whole second measured: no figure rather than a false zero
    assert throughput(series, 1, 0).mean is None


def test_recorder_excludes_warmup_from_latency(tmp_path: Path) -> None:
    import time

    rec = Recorder(str(tmp_path), "w")
    now = time.monotonic_ns()
    rec.open(now - 2_000_000_000, now - 1_000_000_000, now + 10_000_000_000)
    rec.on_received(0, 1, 0, now - 1_500_000_000)  # intended during warm-up
    rec.on_received(0, 1, 1, now - 1_000)  # inside the window
    figs = rec.figures()
    assert figs.received == 2
    assert latency.decode(figs.hist["one_way"]).get_total_count() == 1
    rec.ledger.close()


def test_duplicates_count_in_neither_series_nor_latency(tmp_path: Path) -> None:
    import time

    rec = Recorder(str(tmp_path), "w")
    now = time.monotonic_ns()
    rec.open(now - 1_000_000_000, now - 1_000_000_000, now + 10_000_000_000)
    for _ in range(3):  # one message delivered three times
        rec.on_received(0, 1, 7, now - 5_000_000)
    figs = rec.figures()
    assert sum(figs.series["received"]) == 1
    assert latency.decode(figs.hist["one_way"]).get_total_count() == 1
    assert figs.duplicates == 2
    rec.ledger.close()


def test_a_message_another_server_already_had_is_a_duplicate_on_arrival(tmp_path: Path) -> None:
    # a redelivery to the second server of a pool must not count as a second delivery
    a = Ledger(str(tmp_path), "s0")
    b = Ledger(str(tmp_path), "s1")
    assert a.record(0, 1, 5)
    b.record(0, 1, 6)  # b's own ledger exists; it looks for siblings about once a second
    b.look_for_siblings()
    assert not b.record(0, 1, 5)
    assert b.unique == 1
    a.close()
    b.close()
    assert count_ledgers(str(tmp_path), {1: 7}) == (2, 1)


def test_one_way_and_round_trip_have_their_own_histograms(tmp_path: Path) -> None:
    import time

    rec = Recorder(str(tmp_path), "w")
    now = time.monotonic_ns()
    rec.open(now - 1_000_000_000, now - 1_000_000_000, now + 10_000_000_000)
    for seq in range(10):  # an in-process call: the server's receipt and the caller's reply
        rec.on_received(0, 1, seq, now - 1_000_000)
        rec.on_reply(now - 3_000_000)
    figs = rec.figures()
    assert latency.decode(figs.hist["one_way"]).get_total_count() == 10
    assert latency.decode(figs.hist["round_trip"]).get_total_count() == 10
    rec.ledger.close()


def test_failed_calls_sit_inside_the_percentiles_as_lower_bounds() -> None:
    fast = latency.new_histogram()
    fast.record_value(1_000, 97)  # 97 calls answered in 1 ms
    timed_out = latency.summary(fast, 3, "round_trip", 2.0)  # 3 calls timed out at 2 s
    assert timed_out["p50"] == pytest.approx(1.0, rel=0.01)
    # p99 falls among the timeouts: reported as at least the timeout, never as 1 ms
    assert timed_out["p99"] == 2000.0 and "p99" in timed_out["censored"]
    assert timed_out["failed_percent"] == 3.0
    slow = latency.new_histogram()
    slow.record_value(1_000, 97)
    slow.record_value(1_500_000, 3)  # 3 calls answered slowly, in 1.5 s
    answered = latency.summary(slow, 0, "round_trip", 2.0)
    assert answered["censored"] == []
    # the driver that timed out cannot look better at p99 than the slow one
    assert timed_out["p99"] >= answered["p99"]


def test_values_over_the_range_are_counted_not_dropped() -> None:
    h = latency.new_histogram()
    over = latency.record(h, {500: 9, 2 * latency.HIGHEST_US: 1})
    assert over == 1 and h.get_total_count() == 10
    assert "max" in latency.summary(h, 0, "one_way", 10.0)["censored"]


@pytest.mark.parametrize("digits", [latency.DIGITS, latency.SECOND_DIGITS])
def test_folded_latencies_give_the_same_histogram_as_one_by_one(digits: int) -> None:
    # the fold merges values into buckets before hdrh sees them: every figure must be
    # what recording each value would give, at each edge of hdrh's bucket widths
    rng = random.Random(7)
    values = [int(rng.expovariate(1 / 3000)) for _ in range(20_000)]
    values += [0, 1, 255, 256, 257, 2047, 2048, 2049, 4095, 4096, 4097, 123_456_789]
    folded, one_by_one = latency.new_histogram(digits), latency.new_histogram(digits)
    counts: dict[int, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
        one_by_one.record_value(max(v, latency.LOWEST_US))
    latency.record(folded, counts)
    assert folded.encode() == one_by_one.encode()
    for p in (0.0, 50.0, 90.0, 99.0, 99.9, 100.0):
        assert folded.get_value_at_percentile(p) == one_by_one.get_value_at_percentile(p)
    assert folded.get_max_value() == one_by_one.get_max_value()
    assert folded.get_min_value() == one_by_one.get_min_value()


def test_worker_figures_cross_the_wire_and_merge() -> None:
    a = WorkerFigures(sent=3, sent_by_client={1: 3}, errors={"CallTimeout": 1},
                      series={"sent": [1, 2]})  # fmt: skip
    b = WorkerFigures(sent=2, sent_by_client={2: 2}, errors={"CallTimeout": 2},
                      series={"sent": [0, 1, 1]})  # fmt: skip
    merged = WorkerFigures.from_wire(a.to_wire()).merge(WorkerFigures.from_wire(b.to_wire()))
    assert merged.sent == 5 and merged.sent_by_client == {1: 3, 2: 2}
    assert merged.errors == {"CallTimeout": 3}
    assert merged.series["sent"] == [1, 3, 1]


def test_a_seconds_figures_keep_growing_across_snapshots(tmp_path: Path) -> None:
    # each snapshot folds what arrived since the last; a second already sent in one
    # snapshot still gains what arrives in it afterwards (series and histogram alike)
    import time

    rec = Recorder(str(tmp_path), "w")
    now = time.monotonic_ns()
    rec.open(now, now, now + 10_000_000_000)
    rec.on_received(0, 1, 0, now)
    rec.on_reply(now)
    first = rec.figures()
    for seq in (1, 2):
        rec.on_received(0, 1, seq, now)
        rec.on_reply(now)
    second = rec.figures()
    rec.ledger.close()
    for kind, series in (("one_way", "received"), ("round_trip", "round_trip")):
        assert sum(first.series[series]) == 1 and sum(second.series[series]) == 3
        assert sum(latency.decode(e).get_total_count() for e in first.per_second[kind] if e) == 1
        assert sum(latency.decode(e).get_total_count() for e in second.per_second[kind] if e) == 3


def test_a_recorders_histograms_are_the_values_recorded_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the recorder packs, counts and buckets latencies before hdrh sees them: its
    # step histogram (3 digits) and per-second histogram (2 digits) must be exactly
    # what recording each latency would give
    from mqlab.worker import clock

    now = 10**15
    monkeypatch.setattr(clock, "now", lambda: now)
    rec = Recorder(str(tmp_path), "w")
    rec.open(now - 10**8, now - 10**13, now + 10**9)  # every send time in the window
    rng = random.Random(3)
    values = [int(rng.expovariate(1 / 3000)) for _ in range(5_000)]
    values += [int(rng.uniform(0, 2_000_000)) for _ in range(5_000)]  # a spread backlog
    values += [0, 255, 256, 2047, 2048, 2049, 4095, 4096, 4097, latency.HIGHEST_US + 5]
    # a send time just after its receipt counts as 0; over 71 minutes, as over the range
    values += [-3, -1, (1 << 32) + 7]
    step, second = latency.new_histogram(), latency.new_histogram(latency.SECOND_DIGITS)
    for seq, us in enumerate(values):
        rec.on_received(0, 1, seq, now - us * 1000)
        for h in (step, second):
            h.record_value(min(max(us, latency.LOWEST_US), latency.HIGHEST_US))
    figs = rec.figures()
    rec.ledger.close()
    assert figs.hist["one_way"] == latency.encode(step)
    assert figs.per_second["one_way"] == [latency.encode(second)]
    assert figs.over_range == 2
