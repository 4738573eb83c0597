"""The tables of docs/findings.md a profile's own shape needs, built from a stored run.

``mqlab show RUN --table TABLE`` prints one of them (``--markdown`` for a page), so that
every table of figures in the findings comes from a results file by one command
(``scripts/figures.py``), never copied by hand:

- ``rolling``: each rolling update in one row: what it sent, lost, duplicated and timed
  out, p99 before and at its peak, the seconds above twice that, each replacement's stop to
  serving and, across wire families, the servers' CPU before, while listening twice, after;
- ``faults``: each step's fault events, one row per event under the step's figures;
- ``background``: each probe measured alone beside the same probe under a background load
  (``background``), and the background's own figures;
- ``codec``: what encoding and decoding one message cost for each codec setting;
- ``topologies``: one row per scenario, each pattern's best msg/s, the losses, the broker
  nodes' CPU; and each row's rates as ratios to the first row's;
- ``trust``: how far to trust each step: contended, unstable and their figures;
- ``cpu``: each step's CPU, the broker's and the workers', as % of one core and per
  delivered message.

Each is a header and rows of text, rendered by :func:`mqlab.live.seedtables.table` or
:func:`mqlab.live.seedtables.markdown`. Every row ends with the step's trust flags.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mqlab.live.cells import flags, ms, num, trust_note
from mqlab.live.steptables import background_label
from mqlab.record.step import StepRecord

__all__ = ["TABLES", "build"]

Rows = list[list[str]]
PATTERNS = ("call", "cast", "notify")


def _f(v: float | None, fmt: str = "{:,.0f}") -> str:
    return num(v, fmt)


def rolling(steps: Sequence[StepRecord], env: Mapping[str, Any]) -> tuple[list[str], Rows]:
    upd = [s for s in steps if s.figures.update is not None]
    dual = any(p.dual_listening for s in upd for p in s.figures.phases or ())
    head = ["scenario", "driver", "sent", "lost", "dup", "timed out", "p99 before ms",
            "p99 peak ms", "s above 2x", "stop to serving, s",
            *(["servers CPU %: before / dual / after"] if dual else []), "note"]  # fmt: skip
    rows = []
    for s in upd:
        u, f = s.figures.update, s.figures
        assert u is not None
        gaps = [e.gap_s for e in f.events or () if e.gap_s is not None]
        rows.append([
            s.cell.scenario, s.cell.driver, num(f.sent), num(u.lost), num(u.duplicates),
            num(u.timed_out), ms(u.p99_before_ms), ms(u.p99_peak_ms), num(u.bump_seconds),
            ", ".join(f"{g:.1f}" for g in gaps) or "-", *([_dual_cpu(s)] if dual else []),
            trust_note(s.trust),
        ])  # fmt: skip
    return head, rows


def _dual_cpu(s: StepRecord) -> str:
    """The servers' CPU before the update, in the phase most servers listened twice, after."""
    phases = s.figures.phases or ()
    before = next((p for p in phases if p.name == "before"), None)
    after = next((p for p in phases if p.name == "after"), None)
    most = max(phases, key=lambda p: p.dual_listening or 0, default=None)
    cpu = [p.servers_cpu_percent if p is not None else None for p in (before, most, after)]
    n = most.dual_listening if most is not None else None
    return f"{_f(cpu[0])} / {_f(cpu[1])} ({num(n)} dual) / {_f(cpu[2])}"


def faults(steps: Sequence[StepRecord], env: Mapping[str, Any]) -> tuple[list[str], Rows]:
    head = ["scenario", "pattern", "driver", "msg/s", "lost", "dup", "errors", "event",
            "detect s", "recover s", "outage s", "fails by", "verdict", "note"]  # fmt: skip
    rows = []
    for s in steps:
        f = s.figures
        for i, e in enumerate(f.faults or ()):
            step = [s.cell.scenario, s.cell.pattern, s.cell.driver, _f(f.throughput.mean),
                    num(f.lost), num(f.duplicates), num(f.error_count)]  # fmt: skip
            detect = f"{e.detect_s:.0f} ({e.detected_by})" if e.detect_s is not None else "-"
            rows.append([
                *(step if i == 0 else [""] * len(step)), e.event, detect,
                _f(e.recover_s), _f(e.outage_s, "{:.1f}"), e.fails_by or "-",
                f"{e.verdict}: {e.promise}" if e.promise else e.verdict,
                trust_note(s.trust) if i == 0 else "",
            ])  # fmt: skip
    return head, rows


def _alone(s: StepRecord, steps: Sequence[StepRecord]) -> StepRecord | None:
    """The step that measured ``s``'s probe alone: same driver, pattern, load and repeat."""
    c = s.cell
    return next(
        (o for o in steps
         if o.background is None and o.repeat == s.repeat and o.cell.driver == c.driver
         and o.cell.pattern == c.pattern and o.cell.load == c.load),
        None,
    )  # fmt: skip


def probes(steps: Sequence[StepRecord], env: Mapping[str, Any]) -> tuple[list[str], Rows]:
    head = ["repeat", "driver", "probe", "alone msg/s", "p99 ms", "under", "msg/s", "p99 ms",
            "ratio msg/s", "ratio p99", "note"]  # fmt: skip
    rows = []
    for s in steps:
        b, alone = s.background, _alone(s, steps)
        if b is None or alone is None:
            continue
        a_rate, rate = alone.figures.throughput.mean, s.figures.throughput.mean
        a_p99, p99 = alone.figures.latency_ms.p99, s.figures.latency_ms.p99
        rows.append([
            str(s.repeat + 1), s.cell.driver, f"{s.cell.pattern} {s.cell.load.label()}",
            _f(a_rate), ms(a_p99), f"{b.pattern}@{_f(b.rate, '{:g}')}/s", _f(rate), ms(p99),
            _ratio(rate, a_rate), _ratio(p99, a_p99),
            "; ".join(
                f"{side}: {t}"
                for side, t in (("alone", trust_note(alone.trust)), ("under", trust_note(s.trust)))
                if t
            ),
        ])  # fmt: skip
    return head, rows


def _ratio(v: float | None, base: float | None) -> str:
    return f"{v / base:.2f}x" if v is not None and base else "-"


def background(steps: Sequence[StepRecord], env: Mapping[str, Any]) -> tuple[list[str], Rows]:
    head = ["#", "driver", "probe", "background", "sent/s", "delivered/s", "sent", "received",
            "lost", "unaccounted", "dup", "p50 ms", "p99 ms", "note"]  # fmt: skip
    rows = []
    for s in steps:
        b = s.background
        if b is None or b.sent is None:
            continue
        rows.append([
            str(s.step + 1), s.cell.driver, s.cell.scenario, background_label(b),
            _f(b.achieved_rate), _f(b.throughput.mean), num(b.sent), num(b.received), num(b.lost),
            num(b.unaccounted), num(b.duplicates), ms(b.latency_ms.p50), ms(b.latency_ms.p99),
            "; ".join(x for x in (str(flags(b.flags)), trust_note(s.trust)) if x),
        ])  # fmt: skip
    return head, rows


def codec(steps: Sequence[StepRecord], env: Mapping[str, Any]) -> tuple[list[str], Rows]:
    costs = env.get("codec_cost_us")
    rows = [
        [*str(k).split(" ", 1), f"{v:.1f} µs"]
        for k, v in (costs.items() if isinstance(costs, dict) else ())
        if isinstance(v, int | float)
    ]
    return ["codec", "message sizes", "encode + decode per message"], rows


def topologies(steps: Sequence[StepRecord], env: Mapping[str, Any]) -> tuple[list[str], Rows]:
    best = _best(steps)
    nodes = max((len(s.figures.cpu.nodes or ()) for s in steps), default=0)
    head = ["driver", "scenario", *(f"{p} msg/s" for p in PATTERNS), "lost",
            *(["broker CPU % per node (call)"] if nodes > 1 else []), "note"]  # fmt: skip
    rows = []
    for (driver, scenario), mine in best.items():
        lost = [s.figures.lost for s in steps if (s.cell.driver, s.cell.scenario) == (driver,
                scenario)]  # fmt: skip
        call = mine.get("call")
        cpu = "/".join(_f(n.cpu_percent) for n in (call.figures.cpu.nodes or ())) if call else "-"
        # one row holds a step per pattern: each note says whose it is
        notes = dict.fromkeys(f"{p}: {t}" for p, s in mine.items() if (t := trust_note(s.trust)))
        rows.append([
            driver, scenario,
            *(_f(mine[p].figures.throughput.mean) if p in mine else "-" for p in PATTERNS),
            num(sum(v for v in lost if v is not None)) if any(v is not None for v in lost)
            else "-", *([cpu or "-"] if nodes > 1 else []), "; ".join(notes),
        ])  # fmt: skip
    return head, rows


def _best(steps: Sequence[StepRecord]) -> dict[tuple[str, str], dict[str, StepRecord]]:
    """Per driver and scenario, each pattern's step of the highest msg/s (finished steps)."""
    best: dict[tuple[str, str], dict[str, StepRecord]] = {}
    for s in steps:
        if s.figures.status not in ("done", None) or s.figures.throughput.mean is None:
            continue
        mine = best.setdefault((s.cell.driver, s.cell.scenario), {})
        old = mine.get(s.cell.pattern)
        if old is None or (s.figures.throughput.mean > (old.figures.throughput.mean or 0)):
            mine[s.cell.pattern] = s
    return best


def ratios(steps: Sequence[StepRecord], env: Mapping[str, Any]) -> tuple[list[str], Rows]:
    """Each scenario's best rates (:func:`topologies`) as ratios to the first scenario's."""
    best = list(_best(steps).items())
    head = ["driver", "scenario", *(f"{p} / first" for p in PATTERNS)]
    if not best:
        return head, []
    first = best[0][1]
    rows = [
        [driver, scenario, *(
            _ratio(mine[p].figures.throughput.mean, first[p].figures.throughput.mean)
            if p in mine and p in first else "-" for p in PATTERNS
        )]
        for (driver, scenario), mine in best
    ]  # fmt: skip
    return head, rows


def trust(steps: Sequence[StepRecord], env: Mapping[str, Any]) -> tuple[list[str], Rows]:
    head = ["#", "driver", "scenario", "load", "msg/s", "others % of machine", "steal %",
            "run queue", "CV %", "flags"]  # fmt: skip
    rows = []
    for s in steps:
        t = s.trust
        rows.append([
            str(s.step + 1), s.cell.driver, s.cell.scenario, s.cell.load.label(),
            _f(s.figures.throughput.mean),
            *([_f(t.others_percent), _f(t.steal_percent, "{:.1f}"),
               _f(t.run_queue, "{:.1f}"), _f(t.cv_percent)] if t else ["-"] * 4),
            trust_note(t) if t else "not judged (an older file)",
        ])  # fmt: skip
    return head, rows


def _per_message(percent: float | None, rate: float | None) -> str:
    """CPU µs per message: ``percent`` of one core over ``rate`` messages a second."""
    if percent is None or not rate:
        return "-"
    return _f(percent * 1e4 / rate)


def cpu(steps: Sequence[StepRecord], env: Mapping[str, Any]) -> tuple[list[str], Rows]:
    head = ["#", "scenario", "pattern", "load", "driver", "msg/s", "broker CPU %",
            "broker µs/msg", "clients CPU %", "clients µs/msg", "servers CPU %",
            "servers µs/msg", "note"]  # fmt: skip
    rows = []
    for s in steps:
        c, rate = s.figures.cpu, s.figures.throughput.mean
        rows.append([
            str(s.step + 1), s.cell.scenario, s.cell.pattern, s.cell.load.label(),
            s.cell.driver, _f(rate),
            *(cell for percent in (c.broker_percent, c.clients_percent, c.servers_percent)
              for cell in (_f(percent, "{:.1f}"), _per_message(percent, rate))),
            trust_note(s.trust),
        ])  # fmt: skip
    return head, rows


Table = Callable[[Sequence[StepRecord], Mapping[str, Any]], tuple[list[str], Rows]]
#: ``--table`` NAME -> its title and how it is built (a name may build more than one table)
TABLES: dict[str, tuple[tuple[str, Table], ...]] = {
    "rolling": (("each rolling update", rolling),),
    "faults": (("each fault event", faults),),
    "background": (
        ("each probe alone and under its background load", probes),
        ("the background itself (its own figures, beside each probe)", background),
    ),
    "codec": (("the codec's cost on this machine", codec),),
    "topologies": (
        ("each scenario's best msg/s per pattern", topologies),
        ("each scenario's rates as ratios to the first scenario's", ratios),
    ),
    "trust": (("how far to trust each step", trust),),
    "cpu": (("each step's CPU: the broker's and the workers', per delivered message", cpu),),
}


def build(name: str, steps: Sequence[StepRecord], env: Mapping[str, Any]) -> list[
    tuple[str, list[str], Rows]
]:  # fmt: skip
    """The tables ``--table name`` prints: each with its title, header and rows."""
    return [(title, *make(steps, env)) for title, make in TABLES[name]]
