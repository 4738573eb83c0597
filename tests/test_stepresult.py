"""A step's result from its workers' figures: what the table and the file then say."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace

import pytest

from mqlab.config.plan import Layout, Step, layout, make_plan
from mqlab.config.profile import parse_profile
from mqlab.measure import latency
from mqlab.measure.account import Client, Depth, History, Receipts, account
from mqlab.measure.figures import WorkerFigures
from mqlab.record.figures import Drain
from mqlab.record.sections import BrokerFacts, HostsSection, Losses
from mqlab.record.shape import ShapeProblem, check
from mqlab.record.step import StepRecord
from mqlab.record.wire import shape_of
from mqlab.run.drain import Drained
from mqlab.run.stepresult import Collected, Outcome, build


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
    drained = Drained(Drain(drain_end="idle", still_queued=still_queued, depth_unknown=False))
    return Outcome(step, lay, clients, servers, first_s=0, window_s=len(received),
                   unique=sum(received), drained=drained)  # fmt: skip


def record(got: Collected, drained: Drain = Drain()) -> StepRecord:
    """The step's record as the runner assembles it, with nothing from the later stages."""
    return StepRecord(
        step=0, cell=got.cell, drain=drained, figures=got.figures, broker=BrokerFacts(),
        hosts=HostsSection(), losses=Losses(), flags=got.flags,
    )  # fmt: skip


def test_a_consumer_falling_behind_with_growing_latency_is_flagged_as_backlog() -> None:
    growing = build(_outcome([700] * 6, [5, 6, 20, 40, 80, 160]))
    assert [f.code for f in growing.flags] == ["backlog_growing"]
    # keeping up with flat latency: a steady state, nothing to flag
    steady = build(_outcome([1000] * 6, [5, 6, 5, 6, 5, 6]))
    assert steady.flags == ()
    # slower than offered but latency flat (a lossy driver, not a queue): not a backlog
    lossy = build(_outcome([700] * 6, [5, 6, 5, 6, 5, 6]))
    assert lossy.flags == ()


def _accounted(o: Outcome, depth: int | None) -> Outcome:
    """The outcome with its account: the 4,200 first of 6,000 messages arrived, the broker
    said it held ``depth`` of the step's messages (None: it could not say)."""
    h = History(
        1, (Client(1, 6000),), (Receipts(0, 1, (1 << 4200) - 1),), 0, 1, keeps=True,
        depths=(Depth("q", depth, why="" if depth is not None else "the API did not answer"),),
    )  # fmt: skip
    return replace(o, account=account(h))


def test_the_figures_count_the_account_still_queued_unaccounted_not_lost() -> None:
    rec = build(_accounted(_outcome([700] * 6, [5] * 6), 1000)).figures
    assert (rec.sent or 0) - (rec.received or 0) == 1800
    assert rec.unaccounted == 1000 and rec.lost == 800
    flags = build(_accounted(_outcome([700] * 6, [5] * 6), 1000)).flags
    assert [f.message for f in flags if f.code == "unaccounted"] == [
        "unaccounted when the drain ended: 1,000 still queued"
    ]
    # a broker that keeps messages and cannot say how many: none is called lost
    unknown = build(_accounted(_outcome([700] * 6, [5] * 6), None))
    assert unknown.figures.lost == 0 and unknown.figures.unaccounted == 1800
    assert "1,800 the API did not answer" in unknown.flags[-1].message


def test_the_record_is_written_as_its_types_declare_and_read_back_as_itself() -> None:
    got = build(_accounted(_outcome([700] * 6, [5] * 6, still_queued=1000), 1000))
    rec = record(got, Drain(drain_s=0.5, drain_end="idle", still_queued=1000, depth_unknown=False))
    wire = rec.to_wire()
    shape = shape_of(StepRecord)
    assert set(wire) <= set(shape.fields)  # every key written is one the reader declares
    assert set(shape.required) <= set(wire)  # and every key it requires is written
    check(shape, json.loads(json.dumps(wire)), "step")
    assert wire["flags"] == [{"code": "unaccounted", "message": got.flags[0].message}]
    assert wire["throughput"] == {"mean": 700.0, "stdev": 0.0, "seconds": 6}
    assert wire["series"]["received"] == [700] * 6 and wire["workers_lost"] == []
    assert json.loads(json.dumps(wire)) == wire  # plain JSON: nothing typed is left in it
    assert StepRecord.from_wire(json.loads(json.dumps(wire))) == rec


def test_a_record_missing_a_key_is_refused_by_the_reader() -> None:
    wire = record(build(_outcome([700] * 6, [5] * 6))).to_wire()
    del wire["lost"]
    with pytest.raises(ShapeProblem, match="lost: missing"):
        check(shape_of(StepRecord), json.loads(json.dumps(wire)), "step")
