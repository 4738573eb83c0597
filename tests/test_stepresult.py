"""A step's result from its workers' figures: what the table and the file then say."""

from __future__ import annotations

import json
import tomllib

import pytest

from mqlab.config.plan import Layout, Step, layout, make_plan
from mqlab.config.profile import parse_profile
from mqlab.measure import latency
from mqlab.measure.figures import WorkerFigures
from mqlab.measure.steprecord import StepRecord
from mqlab.run.stepresult import Outcome, build


def _step() -> tuple[Step, Layout]:
    data = tomllib.loads(
        '[drivers.a]\nplugin = "loopback"\n[[scenario]]\npattern = "cast"\nconcurrency = 10\n'
    )
    step = make_plan(parse_profile(data)).steps[0]
    return step, layout(step, ("x://",), {}, "r", 1, False)


def _per_second(ms: list[float]) -> list[str]:
    out = []
    for v in ms:
        h = latency.new_histogram(latency.SECOND_DIGITS)
        h.record_value(int(v * 1000), 100)
        out.append(latency.encode(h))
    return out


def _outcome(received: list[int], p50_ms: list[float], still_queued: int | None = None) -> Outcome:
    step, lay = _step()
    sent = [1000] * len(received)
    clients = WorkerFigures(sent=sum(sent), sent_by_client={1: sum(sent)}, series={"sent": sent})
    one_way = latency.new_histogram()
    one_way.record_value(5_000, sum(received))
    servers = WorkerFigures(
        received=sum(received), series={"received": received},
        hist={"one_way": latency.encode(one_way)}, per_second={"one_way": _per_second(p50_ms)},
    )  # fmt: skip
    return Outcome(step, lay, clients, servers, first_s=0, window_s=len(received),
                   unique=sum(received), still_queued=still_queued)  # fmt: skip


def test_a_consumer_falling_behind_with_growing_latency_is_flagged_as_backlog() -> None:
    growing = build(_outcome([700] * 6, [5, 6, 20, 40, 80, 160]))
    assert [f.code for f in growing.flags] == ["backlog_growing"]
    # keeping up with flat latency: a steady state, nothing to flag
    steady = build(_outcome([1000] * 6, [5, 6, 5, 6, 5, 6]))
    assert steady.flags == ()
    # slower than offered but latency flat (a lossy driver, not a queue): not a backlog
    lossy = build(_outcome([700] * 6, [5, 6, 5, 6, 5, 6]))
    assert lossy.flags == ()


def test_messages_still_queued_are_unaccounted_not_lost() -> None:
    rec = build(_outcome([700] * 6, [5] * 6, still_queued=1000))
    assert rec.sent - rec.received == 1800
    assert rec.unaccounted == 1000 and rec.lost == 800
    assert "unaccounted" in [f.code for f in rec.flags]
    # a broker that cannot tell: everything missing is lost, as before
    unknown = build(_outcome([700] * 6, [5] * 6, still_queued=None))
    assert unknown.lost == 1800 and unknown.unaccounted == 0


#: the keys of a step's record in the results file, in their order (docs/results.md)
WRITTEN = [
    "step", "driver", "plugin", "scenario", "pattern", "concurrency", "rate", "repeat",
    "servers", "targets", "consumers", "batch", "groups", "serializer", "envelope",
    "message_size", "durable", "queue_type", "timeout_s", "settings", "status", "workers_lost",
    "sent", "expected", "received", "round_trip", "lost", "unaccounted", "still_queued",
    "depth_unknown", "held", "drain_s", "drain_end", "duplicates", "out_of_order", "errors",
    "error_messages", "throughput", "latency_ms", "latency", "histograms", "open_loop", "flags",
    "cpu", "series", "drained_in_s",
]  # fmt: skip


def test_the_record_is_written_with_the_results_files_keys_and_read_back_as_itself() -> None:
    rec = build(_outcome([700] * 6, [5] * 6, still_queued=1000))
    wire = rec.to_wire()
    assert list(wire) == WRITTEN
    assert wire["flags"] == [{"code": "unaccounted", "message": rec.flags[0].message}]
    assert wire["throughput"] == {"mean": 700.0, "stdev": 0.0, "seconds": 6}
    assert wire["series"]["received"] == [700] * 6 and wire["workers_lost"] == []
    assert json.loads(json.dumps(wire)) == wire  # plain JSON: nothing typed is left in it
    # the keys a later stage adds are kept, typed where the live view reads them
    later = {**wire, "verdict": {"note": "n", "failed": False}, "cores": {"asked": None}}
    back = StepRecord.from_wire(later)
    assert back.verdict == {"note": "n", "failed": False} and back.extra == {
        "cores": {"asked": None}
    }
    assert StepRecord.from_wire(wire) == rec


def test_a_record_missing_a_key_is_refused() -> None:
    wire = build(_outcome([700] * 6, [5] * 6)).to_wire()
    del wire["lost"]
    with pytest.raises(KeyError, match="lacks 'lost'"):
        StepRecord.from_wire(wire)
