"""Every loss explains itself: attribution through the ledger, the note in words, the verdict.

The end-to-end test registers a test-only plugin (a loopback transport whose server drops
every tenth delivery on purpose, reporting nothing) the way a user's plugin is registered:
an installed distribution's entry point, on the ``PYTHONPATH`` of ``mqlab run`` and so of
its worker processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mqlab.faults.attribution import Candidate, attribute
from mqlab.faults.explain import explain
from mqlab.faults.losses import not_measured
from mqlab.measure.ledger import Ledger
from mqlab.record.events import Event, Spontaneous, Verdict
from mqlab.record.figures import Figures
from mqlab.record.sections import Losses
from mqlab.record.values import Latency, Series, Throughput
from mqlab.record.wire import to_wire
from tests.helpers import ROOT, write_profile

_DROPPY = '''
"""A loopback transport whose servers drop every tenth delivery, and say nothing."""
from mqlab.loopback import LoopbackTransport


class DroppyTransport(LoopbackTransport):
    async def serve_rpc(self, target, handler):
        seen = [0]

        def dropping(body):
            seen[0] += 1
            return None if seen[0] % 10 == 0 else handler(body)

        await super().serve_rpc(target, dropping)
'''


def _register_droppy(site: Path) -> None:
    site.mkdir()
    (site / "droppy_plugin.py").write_text(_DROPPY)
    info = site / "mqlab_droppy-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mqlab-droppy\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text(
        "[mqlab.transports]\ndroppy = droppy_plugin:DroppyTransport\n"
    )


def test_a_loss_no_event_explains_is_unexplained_in_red_and_fails_the_verdict(
    tmp_path: Path,
) -> None:
    _register_droppy(tmp_path / "site")
    profile = write_profile(
        tmp_path / "p.toml",
        '[run]\nduration = "1s"\nwarmup = "0s"\ndrain = "2s"\n'
        '[drivers.droppy]\nplugin = "droppy"\n'
        '[[scenario]]\npattern = "cast"\nconcurrency = 4\n',
    )
    out = tmp_path / "r.json"
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(tmp_path / "site")}
    proc = subprocess.run(
        [sys.executable, "-m", "mqlab.console.cli", "run", str(profile), "-o", str(out)],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [step] = json.loads(out.read_text())["steps"]
    assert step["lost"] > 0 and step["spontaneous"] == []
    assert step["attribution"] == {"events": [], "no_event": {"lost": step["lost"],
                                                              "duplicates": 0}}  # fmt: skip
    verdict = step["verdict"]
    assert verdict["verdict"] == "unexplained" and verdict["failed"] is True
    assert f"{step['lost']:,} lost with no event: unexplained" in verdict["note"]
    assert {"code": "unexplained", "message": verdict["note"]} in step["flags"]
    assert step["broker_flow"]["available"] is False
    assert "no broker" in step["broker_flow"]["why"]
    assert "with no event: unexplained" in proc.stdout  # the step's line and its events table
    # the report says it too, in red
    page = tmp_path / "r.html"
    shown = subprocess.run(
        [sys.executable, "-m", "mqlab.console.cli", "report", str(out), "-o", str(page)],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    html = page.read_text()
    assert '<span class="bad">no event</span>' in html
    assert f'<span class="bad">{step["lost"]:,}</span>' in html


def _ledger(tmp: Path, received: list[int], client: int = 1) -> None:
    led = Ledger(str(tmp), "s0")
    for seq in received:
        led.record(0, client, seq)
    led.close()


def _lost(cause: str, t: int, marks: dict[int, int], worker: str = "c1") -> Candidate:
    return Candidate(f"connection_lost {worker}", "connection_lost", t, worker, "conn", marks)


def test_each_loss_goes_to_the_first_event_after_its_send_and_the_rest_to_none(
    tmp_path: Path,
) -> None:
    # 100 sent; 10..19 lost before the first event (mark 50), 60..64 before the second
    # (mark 80), 90..94 after every event
    lost = set(range(10, 20)) | set(range(60, 65)) | set(range(90, 95))
    _ledger(tmp_path, [s for s in range(100) if s not in lost])
    evs = [_lost("timed out", 1, {1: 50}), _lost("timed out", 2, {1: 80})]
    per_event, none, dups, dup_none = attribute(evs, str(tmp_path), 1, {1: 100}, 0, 0)
    assert (per_event, none, dups, dup_none) == ([10, 5], 5, [0, 0], 0)
    # three still queued when the drain ended are the last sent: off the no-event share
    per_event, none, _, _ = attribute(evs, str(tmp_path), 1, {1: 100}, 3, 0)
    assert (per_event, none) == ([10, 5], 2)
    # an event on another client's worker explains nothing of this client's
    other = [Candidate("connection_lost c2", "connection_lost", 1, "c2", "x", {2: 40})]
    assert attribute(other, str(tmp_path), 1, {1: 100}, 0, 0)[:2] == ([0], 20)


def test_a_duplicate_goes_to_the_event_after_its_send_whichever_worker_repeated_it(
    tmp_path: Path,
) -> None:
    _ledger(tmp_path, [*range(100), 5, 5])  # s0: every message, then 5 twice more
    other = Ledger(str(tmp_path), "s1")  # a second server got 60 too (a redelivery)
    other.record(0, 1, 60)
    other.close()
    evs = [_lost("timed out", 1, {1: 50})]
    # 5 (sent before the event) repeated twice, 60 (after it) once: 3 duplicates in all
    assert attribute(evs, str(tmp_path), 1, {1: 100}, 0, 3) == ([0], 0, [2], 1)


def _figures(lost: int, duplicates: int = 0) -> Figures:
    return Figures(lost=lost, duplicates=duplicates, throughput=Throughput(),
                   latency_ms=Latency(), series=Series())  # fmt: skip


SPONTANEOUS = (
    Spontaneous(t_s=2.0, kind="blocked", worker="c1", connection="conn",
                cause="the broker blocked the connection (low on memory)", count=1),
    Spontaneous(t_s=6.1, kind="connection_lost", worker="c1", connection="conn",
                cause="TimeoutError(110, 'Connection timed out')", count=1),
)  # fmt: skip


def test_the_note_names_the_timeout_the_flow_control_and_the_promise() -> None:
    ev = Candidate("connection_lost c1", "connection_lost", 6_100_000_000, "c1", "conn", {1: 9})
    cause = "TimeoutError(110, 'Connection timed out')"
    at_most_once: dict[str, object] = {"retry": 0, "tcp_user_timeout": 0.25}

    def judge(options: dict[str, object], lost: int, dups: int = 0) -> Verdict:
        out = explain(_figures(lost, dups), SPONTANEOUS, [ev], [cause], [lost], 0, [dups], 0,
                      None, options, "pika", 1, 0)  # fmt: skip
        assert out.verdict is not None
        return out.verdict

    v = judge(at_most_once, 135_828)
    assert v.note == (
        "135,828 lost when pika's connection timed out (TCP_USER_TIMEOUT 0.25 s) during 4.1 s "
        "of flow control (memory alarm); retry = 0 promises at most once: kept"
    )
    assert v.verdict == "kept" and v.failed is False
    # at most once must not duplicate; at least once must not lose
    assert judge(at_most_once, 0, 7).verdict == "broken"
    assert judge({"retry": 3}, 12).verdict == "broken"
    assert judge({"retry": 3}, 0, 7).verdict == "kept"
    assert judge({}, 12).verdict == "no promise"
    # one phrase for the same cause, counted
    twice = explain(_figures(30), SPONTANEOUS, [ev, ev], [cause, cause], [10, 20], 0, [0, 0],
                    0, None, at_most_once, "pika", 1, 0)  # fmt: skip
    assert twice.verdict is not None and twice.verdict.note.startswith(
        "30 lost when pika's connection timed out 2 times (TCP_USER_TIMEOUT 0.25 s) during"
    )


def test_a_broker_with_no_flow_control_state_says_so_instead_of_a_blank() -> None:
    for server, name in (("nats", "NATS"), ("redis", "Redis"), ("mosquitto", "Mosquitto")):
        flow = to_wire(not_measured(server))
        assert flow["available"] is False and flow["why"].startswith(f"{name} has no flow")
        assert "ticks" not in flow and "longest_spell" not in flow  # nothing that reads as 0


def test_the_live_timeline_marks_what_nobody_injected_beside_the_injected() -> None:
    from dataclasses import replace

    from mqlab.live.timeline import series
    from mqlab.run.stepresult import build
    from tests.test_stepresult import _outcome, record

    def ev(t_s: float | None, kind: str, worker: str) -> Spontaneous:
        return Spontaneous(t_s=t_s, kind=kind, worker=worker, connection="", cause="", count=1)

    got = build(_outcome([1, 2, 3, 4], [5.0] * 4))
    rec = record(got)
    rec = replace(
        rec,
        figures=replace(rec.figures, events=(Event(t_s=2.0, action="memory_alarm"),)),
        losses=Losses(spontaneous=(
            ev(3.3, "connection_lost", "c1"), ev(1.5, "blocked", "c1"), ev(None, "more", ""),
        )),
    )  # fmt: skip
    record_ = rec
    assert series(record_, running=True).events == (
        (1.5, "blocked c1"), (2.0, "memory_alarm"), (3.3, "connection_lost c1"),
    )  # fmt: skip
