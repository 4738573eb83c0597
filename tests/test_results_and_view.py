from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from rich.console import Console

from mqlab.live import comparison, tables
from mqlab.live.snapshot import RunSnapshot, StepRow
from mqlab.record.step import StepRecord
from mqlab.report import summary
from mqlab.results.read import load, load_run
from mqlab.results.store import ResultsFile
from mqlab.run import progress
from mqlab.sdk.urls import mask

from .results_fixtures import schema3_run, trust, typed, write


def _step(driver: str, mean: float, p99: float, lost: int = 0, **more: Any) -> StepRecord:
    return typed(_wire(driver, mean, p99, lost) | more)


def _wire(driver: str, mean: float, p99: float, lost: int = 0) -> dict[str, Any]:
    return {
        "scenario": "call", "pattern": "call", "concurrency": 5, "rate": None, "repeat": 0,
        "driver": driver, "throughput": {"mean": mean, "stdev": 1.0},
        "latency_ms": {"p50": None, "p99": p99}, "lost": lost, "duplicates": 0, "errors": {},
        "step": 0, "sent": 10, "received": 10, "round_trip": 10,
    }  # fmt: skip


def test_results_round_trip_and_survive_each_step(tmp_path: Path) -> None:
    out = tmp_path / "r" / "x.json"
    res = ResultsFile(out, {"name": "p"}, {"python": "3"})
    res.write()
    res.add_step(_step("a", 10, 1))
    # a crash now must not lose the finished step
    assert load(out)["steps"][0]["driver"] == "a"
    res.finish("done")
    doc = load(out)
    assert doc["schema"] == 3 and doc["status"] == "done" and len(doc["steps"]) == 1


def _render(renderable: Any, width: int = 200) -> str:
    console = Console(width=width, record=True, force_terminal=False, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_comparison_shows_ratios_to_the_first_driver() -> None:
    text = _render(
        comparison.comparison([_step("kombu", 330.2, 10.0), _step("pika", 497.6, 5.0, 3)])
    )
    assert "kombu" in text and "pika" in text
    assert "1.51x" in text  # 497.6 / 330.2
    assert "0.50x" in text  # p99 ratio
    assert " 3 " in text  # the lost messages are shown


def test_each_group_keeps_the_profiles_driver_order_when_a_round_runs_reversed(
    tmp_path: Path,
) -> None:
    # interleaved repeats: round 1 runs kombu then pika, round 2 pika then kombu; every
    # group's ratios stay to kombu, the profile's first driver
    steps = [
        _step("kombu", 400, 10.0), _step("pika", 600, 5.0),
        _step("pika", 620, 5.0, repeat=1), _step("kombu", 410, 10.0, repeat=1),
    ]  # fmt: skip
    rows = [
        [c.strip() for c in line.strip("|").split("|")]
        for line in comparison.comparison_markdown(steps).splitlines()[2:]
    ]
    assert [(r[2], r[11]) for r in rows] == [
        ("kombu", "1.00x"), ("pika", "1.50x"), ("kombu", "1.00x"), ("pika", "1.51x"),
    ]  # fmt: skip
    # the report's summary: each cell's drivers in the same order, kombu the ratios' base
    run = load_run(write(tmp_path / "r.json", schema3_run(steps)))
    assert [list(c.steps) for c in summary.cells(run)] == [["kombu", "pika"]] * 2


def test_the_live_tables_note_says_how_far_to_trust_a_finished_step() -> None:
    step = dataclasses.replace(_step("pika", 500, 5.0), trust=trust(True))
    row = progress.row(step, "done")
    text = _render(tables.step_table("finished", [row], live=False))
    assert "contended (others 87 %, run queue 6.5/2 CPUs)" in text
    assert "[contended (others 87 %, run queue 6.5/2 CPUs)]" in tables.plain_line(row, 1)
    quiet = progress.row(dataclasses.replace(step, trust=trust(False)), "done")
    assert "contended" not in _render(tables.step_table("finished", [quiet], live=False))


def test_one_driver_profiles_compare_their_scenarios() -> None:
    json_ = _step("aiormq", 100, 4, scenario="call json")
    msgpack_ = _step("aiormq", 150, 2, scenario="call msgpack")
    text = _render(comparison.comparison([json_, msgpack_]))
    assert "call json (call)" in text and "call msgpack (call)" in text
    assert "1.50x" in text and "0.50x" in text


def test_live_view_renders_header_current_and_finished_steps() -> None:
    done = StepRow(0, "a", "cast", "c=1", "done", sent=100, received=98, lost=2, rate_mean=50.0)
    cur = StepRow(1, "b", "call", "c=5", "measuring", sent=10, round_trip=9, rate_now=9.0,
                  p50_ms=1.5, p99_ms=9.25, cpu_clients=50.0, cpu_broker=20.0)  # fmt: skip
    snap = RunSnapshot("prof", 3, 2, 12.0, 60.0, "amqp://guest:***@h:5672/", cur, (done,))
    text = _render(tables.live(snap))
    assert "step 2 of 3" in text and "prof" in text
    assert "measuring" in text and "9.25" in text and "50/-/20" in text  # clients/servers/broker
    assert "98" in text and "done" in text
    line = tables.plain_line(done, 3)
    assert line.startswith("[1/3] a cast c=1 done") and "lost=2" in line


def test_credentials_are_masked() -> None:
    assert mask("amqp://guest:secret@127.0.0.1:5672/") == "amqp://guest:***@127.0.0.1:5672/"
    assert mask("amqp://127.0.0.1:5672/") == "amqp://127.0.0.1:5672/"


def test_show_reprints_a_results_file_and_refuses_a_bad_one(tmp_path: Path) -> None:
    from .helpers import mqlab

    out = tmp_path / "r.json"
    res = ResultsFile(out, {"run": {"name": "prof"}}, {"mqlab": "0.1.0", "plugins": {}})
    a, b = _wire("kombu", 330.2, 10.0), _wire("pika", 497.6, 5.0)
    a["latency_ms"]["p50"] = b["latency_ms"]["p50"] = 1.0
    res.add_step(typed(a))
    res.add_step(typed(b))
    res.finish("done")
    md = mqlab("show", str(out), "--markdown")
    assert md.returncode == 0, md.stderr
    assert "| call (call) | c=5 | pika | 498 |" in md.stdout and "1.51x" in md.stdout
    assert "Measured with mqlab 0.1.0" in md.stdout
    table = mqlab("show", str(out))
    assert "prof: 2 step(s), done" in table.stdout and "1.51x" in table.stdout
    (tmp_path / "bad.json").write_text("{")
    bad = mqlab("show", str(tmp_path / "bad.json"))
    assert bad.returncode == 2 and "cannot read the results file" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_broker_product_is_asked_of_the_broker_itself() -> None:
    import socket
    import struct
    import threading

    from mqlab.results.environment import amqp_server

    # a fake AMQP 0-9-1 server: connection.start with a capabilities table and two strings
    def table(entries: bytes) -> bytes:
        return struct.pack("!I", len(entries)) + entries

    def longstr(key: str, value: str) -> bytes:
        v = value.encode()
        return bytes([len(key)]) + key.encode() + b"S" + struct.pack("!I", len(v)) + v

    caps = bytes([12]) + b"capabilities" + b"F" + table(bytes([9]) + b"publisher" + b"t\x01")
    props = table(caps + longstr("product", "RabbitMQ") + longstr("version", "3.10.8"))
    payload = b"\x00\x0a\x00\x0a\x00\x09" + props
    frame = struct.pack("!BHI", 1, 0, len(payload)) + payload + b"\xce"
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            assert conn.recv(8) == b"AMQP\x00\x00\x09\x01"
            conn.sendall(frame)

    t = threading.Thread(target=serve)
    t.start()
    assert amqp_server(f"amqp://guest:guest@127.0.0.1:{port}/") == {
        "product": "RabbitMQ",
        "version": "3.10.8",
    }
    t.join()
    srv.close()
    assert amqp_server(f"amqp://127.0.0.1:{port}/") is None  # nobody listens any more


def test_failures_flags_and_unaccounted_are_shown_never_hidden() -> None:
    timed_out = _wire("kombu", 300.0, 2000.0)
    timed_out["latency_ms"].update(censored=["p99", "max"], failed_percent=3.0, p50=1.0)
    timed_out["unaccounted"] = 40
    timed_out["flags"] = [{"code": "backlog_growing", "message": "backlog growing: ..."}]
    text = _render(comparison.comparison([_step("pika", 250.0, 900.0), typed(timed_out)]))
    # the p99 that falls among timed-out calls is a lower bound, not a figure
    assert "≥2,000" in text and "3%" in text
    assert "+40?" in text and "backlog growing" in text
    row = StepRow(0, "kombu", "call", "c=5", "done", lost=0, unaccounted=40,
                  p99_ms=2000.0, p99_lower_bound=True, failed_percent=3.0,
                  flags=("could_not_keep_up",))  # fmt: skip
    line = tables.plain_line(row, 1)
    assert "p99=≥2,000ms" in line and "unaccounted=40" in line and "behind schedule" in line
    assert "≥2,000" in _render(tables.step_table("t", [row], live=False))


def test_show_verbose_prints_again_what_run_printed_after_its_comparison(tmp_path: Path) -> None:
    from .helpers import mqlab, write_profile
    from .test_faults_live import PROFILE  # zmq: a server killed at 3 s, restarted at 6 s

    out = tmp_path / "r.json"
    profile = write_profile(tmp_path / "p.toml", PROFILE)
    run = mqlab("run", str(profile), "-o", str(out), "-q", "--duration", "7s")
    assert run.returncode == 0, run.stderr
    # the fault's tables: its phases, each event, what each loss is put down to
    start = run.stdout.index("phase ")
    details = run.stdout[start : run.stdout.index("codec cost per message")]
    assert "faults: zmq cast" in details and "kill_server server1" in details
    assert "events: zmq cast" in details  # what each loss is put down to
    plain = mqlab("show", str(out))
    verbose = mqlab("show", str(out), "-v")
    assert plain.returncode == verbose.returncode == 0, plain.stderr + verbose.stderr
    assert "faults: zmq cast" not in plain.stdout
    assert details.strip() in verbose.stdout
