"""Every loss explains itself: attribution through the ledger, the note in words, the verdict.

The end-to-end test registers a test-only plugin (a loopback transport whose server drops
every tenth delivery on purpose, reporting nothing) the way a user's plugin is registered:
an installed distribution's entry point, on the ``PYTHONPATH`` of ``mqlab run`` and so of
its worker processes.
"""

from __future__ import annotations

import json
from pathlib import Path

from mqlab.faults.explain import explain
from mqlab.faults.history import Place
from mqlab.faults.losses import not_measured
from mqlab.faults.verdict import no_promise, promise
from mqlab.measure.account import Event as Window
from mqlab.measure.account import History, account
from mqlab.record.events import Event, Spontaneous, Verdict
from mqlab.record.figures import Figures
from mqlab.record.sections import Losses
from mqlab.record.values import Latency, Series, Throughput
from mqlab.record.wire import to_wire
from tests.account_histories import S, got, steady
from tests.helpers import mqlab, plugin_site, run_with_plugins, write_profile

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
    plugin_site(site, "droppy", _DROPPY, "DroppyTransport")


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
    proc = run_with_plugins(tmp_path / "site", str(profile), "-o", str(out), timeout=120)
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
    shown = mqlab("report", str(out), "-o", str(page))
    assert shown.returncode == 0, shown.stderr
    html = page.read_text()
    assert '<span class="bad">no event</span>' in html
    assert f'<span class="bad">{step["lost"]:,}</span>' in html


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
    # 100 casts a second for 10 s; c1's connection timed out at 6.1 s (the driver noticed
    # then: what it took was sent up to a second before), taking what was in it
    c = steady(1, 100, 10)
    lost = window(c, 5.3, 6.1)
    cause = "TimeoutError(110, 'Connection timed out')"
    at_most_once: dict[str, object] = {"retry": 0, "tcp_user_timeout": 0.25}
    # reconnected at 6.2 s
    timed_out = Window(
        "connection_lost c1", "connection_lost", int(5.1 * S), int(6.2 * S), clients=frozenset({1})
    )
    about = {"connection_lost c1": Place("connection_lost", 6.1, "c1", "conn", cause)}

    def judge(
        options: dict[str, object],
        plugin: str = "pika",
        missing: list[int] = lost,
        twice: list[int] = (),
        events: tuple[Window, ...] = (timed_out,),
    ) -> Verdict:
        a = account(History(1, (c,), (got(c, missing, twice),), 0, 11 * S, events=events))
        kept = promise(options, plugin == "pika")
        out = explain(a, about, kept, no_promise(options, plugin), _figures(len(missing)),
                      SPONTANEOUS, None, options, plugin, 1)  # fmt: skip
        assert out.verdict is not None
        return out.verdict

    v = judge(at_most_once)
    assert v.note == (
        f"{len(lost)} lost when pika's connection timed out (TCP_USER_TIMEOUT 0.25 s) during "
        "4.1 s of flow control (memory alarm); retry = 0 promises at most once: kept"
    )
    assert v.verdict == "kept" and v.failed is False
    # at most once must not duplicate; at least once must not lose
    assert judge(at_most_once, missing=[], twice=lost[:7]).verdict == "broken"
    assert judge({"retry": 3}).verdict == "broken"
    assert judge({"retry": 3}, missing=[], twice=lost[:7]).verdict == "kept"
    assert judge({}).verdict == "no promise"
    # the kombu-style driver acks after its handler: its retry = 0 promises nothing
    kombu = judge({"retry": 0}, "kombu", missing=[], twice=lost[:3])
    assert kombu.verdict == "no promise" and kombu.promise is None
    assert "kombu does not declare at-most-once" in kombu.note
    # one phrase for the same cause, counted
    again = Window("connection_lost c1 #2", "connection_lost", int(7.1 * S), clients=frozenset({1}))
    about["connection_lost c1 #2"] = about["connection_lost c1"]
    more = lost + window(c, 7.3, 8.1)
    twice = judge(at_most_once, missing=more, events=(timed_out, again))
    assert twice.note.startswith(
        f"{len(more)} lost when pika's connection timed out 2 times (TCP_USER_TIMEOUT 0.25 s) "
        "during"
    )


def test_an_injected_event_gets_its_verdict_when_nobody_saw_it_act() -> None:
    # a memory alarm the broker's API never showed and the driver never reported, nothing
    # lost: the user injected an event, so the step still says what was promised and kept
    c = steady(1, 100, 10)
    alarm = Window("memory_alarm", "memory_alarm", int(1 * S), int(7 * S), clients=frozenset({1}))
    about = {"memory_alarm": Place("memory_alarm", 1.0, cause="memory alarm on")}
    a = account(History(1, (c,), (got(c, []),), 0, 11 * S, events=(alarm,)))
    options: dict[str, object] = {"retry": 3}
    out = explain(a, about, promise(options, False), no_promise(options, "kombu"),
                  _figures(0), (), None, options, "kombu", 1)  # fmt: skip
    assert out.verdict is not None and out.verdict.verdict == "kept"
    assert out.verdict.note.endswith("retry = 3 promises no loss: kept")
    # and a step with nothing injected and nothing seen has nothing to explain
    quiet = explain(a, {}, promise(options, False), no_promise(options, "kombu"),
                    _figures(0), (), None, options, "kombu", 1)  # fmt: skip
    assert quiet.verdict is None


def window(c: object, a: float, b: float) -> list[int]:
    """The numbers a 100/s client sent from ``a`` s to ``b`` s, every other one."""
    return list(range(round(a * 100) + 1, round(b * 100) - 1, 2))


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
