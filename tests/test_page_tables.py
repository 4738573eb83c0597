"""`mqlab show RUN --markdown --table TABLE` (issue 42): the tables docs/findings.md needs in a
profile's own shape, printed from a stored results file whose figures are known, so that the
findings can be rebuilt from quiet-machine runs by `scripts/figures.py`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from mqlab.record.cpu import Cpu
from mqlab.record.events import Event, FaultFigure, Phase, Update
from mqlab.record.sections import Background, Ceiling, HostLoad
from mqlab.record.step import StepRecord
from mqlab.record.values import Latency, Throughput
from tests import results_fixtures as fx
from tests.helpers import mqlab
from tests.test_stored_runs import _script


def _step(driver: str, pattern: str = "call", mean: float = 1000.0, p99_us: int = 9000,
          scenario: str = "", **figures: Any) -> StepRecord:  # fmt: skip
    s = fx.typed(fx.step(0, driver, pattern, 10, mean=mean, p99_us=p99_us))
    cell = dataclasses.replace(s.cell, scenario=scenario or pattern)
    return dataclasses.replace(s, cell=cell, figures=dataclasses.replace(s.figures, **figures))


def _table(tmp_path: Path, steps: list[StepRecord], name: str) -> list[list[str]]:
    """The rows (header first) of every table `--table name` prints, in order."""
    path = fx.write(tmp_path / f"{name}.json", fx.schema3_run(steps, contended=False))
    done = mqlab("show", str(path), "--markdown", "--table", name)
    assert done.returncode == 0, done.stderr
    return [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in done.stdout.splitlines()
        if line.startswith("| ")
    ]


def test_each_rolling_update_is_one_row_with_what_it_cost(tmp_path: Path) -> None:
    events = (
        Event(t_s=5.0, action="stop", detail="s0"),
        Event(t_s=7.8, action="serving", detail="s0", gap_s=2.831),
        Event(t_s=10.0, action="stop", detail="s1"),
        Event(t_s=12.7, action="serving", detail="s1", gap_s=2.687),
    )
    phases = (
        Phase(name="before", start_s=0, end_s=5, servers_cpu_percent=23.0),
        Phase(name="replace s0", start_s=5, end_s=10, servers_cpu_percent=43.0, dual_listening=3),
        Phase(name="after", start_s=10, end_s=15, servers_cpu_percent=31.0),
    )
    update = Update(timed_out=0, lost=0, duplicates=2, errors=0, p99_before_ms=105.0,
                    p99_peak_ms=745.0, bump_seconds=12, verdict="2 duplicated")  # fmt: skip
    rolled = _step("kombu=>zmq", scenario="call-abrupt", sent=5017, update=update,
                   events=events, phases=phases)  # fmt: skip
    head, row = _table(tmp_path, [_step("kombu"), rolled], "rolling")
    assert head[-2:] == ["servers CPU %: before / dual / after", "note"]
    assert row == ["call-abrupt", "kombu=>zmq", "5,017", "0", "2", "0", "105", "745", "12",
                   "2.8, 2.7", "23 / 43 (3 dual) / 31", ""]  # fmt: skip


def test_each_fault_event_is_a_row_under_its_steps_figures(tmp_path: Path) -> None:
    kill = FaultFigure(
        event="kill_node queues",
        t_s=10.0,
        detect_s=9.0,
        detected_by="throughput",
        recover_s=26.0,
        errors=0,
        outage_s=4.5,
        fails_by="stalls",
        lost=0,
        duplicates=0,
        timed_out=0,
        promise="retry = 3: no loss",
        verdict="kept",
    )
    start = dataclasses.replace(kill, event="start_node queues", t_s=25.0, detect_s=None,
                                recover_s=None, outage_s=0.0, fails_by="-")  # fmt: skip
    failed = _step("kombu", scenario="mirrored", mean=161.0, faults=(kill, start))
    head, first, second = _table(tmp_path, [failed], "faults")
    assert head[7:10] == ["event", "detect s", "recover s"]
    assert first == [
        "mirrored",
        "call",
        "kombu",
        "161",
        "0",
        "0",
        "0",
        "kill_node queues",
        "9 (throughput)",
        "26",
        "4.5",
        "stalls",
        "kept: retry = 3: no loss",
        "",
    ]
    assert second[:7] == [""] * 7 and second[7:10] == ["start_node queues", "-", "-"]


def test_a_probe_alone_sits_beside_the_same_probe_under_its_background(tmp_path: Path) -> None:
    bg = Background(
        pattern="notify",
        rate=1000.0,
        achieved_rate=1000.0,
        kept_up=True,
        sent=12000,
        received=12000,
        lost=0,
        unaccounted=0,
        duplicates=0,
        throughput=Throughput(mean=641.0, stdev=10.0, seconds=10),
        latency_ms=Latency(kind="one_way", p50=3260.0, p99=4743.0),
        flags=(),
    )
    alone = _step("kombu", mean=608.0, p99_us=35_300, scenario="calls")
    loaded = dataclasses.replace(
        _step("kombu", mean=391.0, p99_us=74_400, scenario="calls-under-notify"), background=bg
    )
    _, probe, _, background = _table(tmp_path, [alone, loaded], "background")
    assert probe == ["1", "kombu", "call c=10", "608", "35.3", "notify@1000/s", "391", "74.4",
                     "0.64x", "2.11x", ""]  # fmt: skip
    assert background[:4] == ["2", "kombu", "calls-under-notify", "notify@1000/s"]
    assert background[4:6] == ["1,000", "641"] and background[11:13] == ["3,260", "4,743"]


def test_the_codec_table_and_each_scenarios_best_rate_side_by_side(tmp_path: Path) -> None:
    (_, codec) = _table(tmp_path, [_step("aiormq")], "codec")
    assert codec == ["json+envelope", "openstack", "70.0 µs"]  # the run's own measure
    steps = [
        _step("kombu", "call", 174.0, scenario="HA off"),
        _step("kombu", "cast", 332.0, scenario="HA off"),
        _step("kombu", "call", 113.0, scenario="HA on"),
        _step("kombu", "call", 120.0, scenario="HA on"),  # its best call counts
        _step("kombu", "cast", 340.0, scenario="HA on"),
    ]
    _, off, on, _, off_ratio, on_ratio = _table(tmp_path, steps, "topologies")
    assert off[:5] == ["kombu", "HA off", "174", "332", "-"]
    assert on[:5] == ["kombu", "HA on", "120", "340", "-"]
    assert off_ratio[2:] == ["1.00x", "1.00x", "-"] and on_ratio[2:] == ["0.69x", "1.02x", "-"]
    # a row holds one step per pattern: a flag says which pattern's step it is
    path = fx.write(tmp_path / "busy.json", fx.schema3_run(steps[:2], contended=True))
    done = mqlab("show", str(path), "--markdown", "--table", "topologies")
    assert "call: contended (others 87 %" in done.stdout and "cast: contended" in done.stdout


def test_the_cpu_table_gives_the_brokers_and_the_workers_cpu_per_message(
    tmp_path: Path,
) -> None:
    """mandatory-cost's question: what one message costs the broker, from a stored run."""
    busy = Cpu(broker_percent=57.2, clients_percent=59.6, servers_percent=37.7)
    steps = [_step("pika-mandatory", "cast", 6654.0, cpu=busy), _step("kombu", cpu=Cpu())]
    _, row, unsampled = _table(tmp_path, steps, "cpu")
    # 57.2 % of a core over 6,654 msg/s: 86 µs of broker a message
    assert row[4:12] == ["pika-mandatory", "6,654", "57.2", "86", "59.6", "90", "37.7", "57"]
    assert unsampled[6:12] == ["-"] * 6  # not sampled: no figure made up


def test_a_table_the_run_cannot_fill_is_one_line(tmp_path: Path) -> None:
    path = fx.write(tmp_path / "plain.json", fx.schema3_run([_step("kombu")], contended=False))
    done = mqlab("show", str(path), "--markdown", "--table", "rolling")
    assert done.returncode == 2 and "no step of this run has what --table rolling shows" in (
        done.stderr
    )
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_the_figures_script_runs_a_table_of_a_stored_run() -> None:
    argv = _script().checked("mqlab show docs/runs/x.json.gz --markdown --table faults")
    assert argv == ["show", "docs/runs/x.json.gz", "--markdown", "--table", "faults"]


def test_the_ceiling_table_says_which_steps_ran_on_a_contended_machine(tmp_path: Path) -> None:
    ceiling = Ceiling(size=2450, library="aiormq 6.8.0", mode="auto-ack", rate=9000.0,
                      percent=50.0, error=None, perftest=None)  # fmt: skip
    step = dataclasses.replace(_step("aiormq", "cast", 4500.0), ceiling=ceiling)
    for contended, said in ((True, True), (False, False)):
        path = fx.write(tmp_path / "c.json", fx.schema3_run([step], contended=contended))
        done = mqlab("show", str(path), "--markdown")
        assert done.returncode == 0, done.stderr
        assert ("step 1 (aiormq): contended (others 87 %" in done.stdout) is said, done.stdout


def _runs(tmp_path: Path, *runs: tuple[str, list[StepRecord], bool]) -> list[str]:
    paths = []
    for i, (name, steps, contended) in enumerate(runs):
        run = fx.schema3_run(steps, contended=contended, name=name)
        paths.append(str(fx.write(tmp_path / f"{i}-{name}.json", run)))
    return paths


def test_the_spread_table_lines_up_each_repeat_across_runs_in_run_order(tmp_path: Path) -> None:
    """Issue 31's question, from stored runs: do repeats of the same step agree, per mode?"""
    ceiling = Ceiling(size=200, library="pika 1.4.4", mode="auto-ack", rate=8000.0,
                      percent=100.0, error=None, perftest=None)  # fmt: skip

    def pika(rate: float, loop: float) -> StepRecord:
        share = 10.0 if rate > loop else -5.0  # mqlab's share of the CPU: may be negative
        c = dataclasses.replace(ceiling, rate=loop, percent=rate / loop * 100, mqlab_share=share)
        load = HostLoad(cpus=2, load_avg_1m=(1.5,), other_percent=rate / 1000)
        return dataclasses.replace(_step("pika", "cast", rate), ceiling=c, host_load=load)

    paths = _runs(
        tmp_path,
        ("unpinned", [pika(9000.0, 9000.0)], False),
        ("pinned", [pika(6000.0, 12000.0)], True),
        ("pinned", [pika(8000.0, 8000.0)], False),
        ("unpinned", [pika(11000.0, 5500.0)], False),
    )
    done = mqlab("show", *paths, "--markdown", "--table", "spread")
    assert done.returncode == 0, done.stderr
    rows = {
        (c[1], c[2]): c
        for c in (
            [x.strip() for x in line.strip().strip("|").split("|")]
            for line in done.stdout.splitlines()
            if line.startswith("| ")
        )
    }
    # each mode's repeats in the order they ran, then mean, max - min and CV (pstdev / mean)
    assert rows["msg/s", "unpinned"][3:8] == ["9,000 / 11,000", "10,000", "2,000", "10 %", ""]
    assert rows["msg/s", "pinned"][3:8] == ["6,000 / 8,000", "7,000", "2,000", "14 %",
                                            "contended 1 of 2"]  # fmt: skip
    assert rows["% of loop", "unpinned"][3] == "100 / 200"
    assert rows["loop msg/s", "pinned"][3] == "12,000 / 8,000"
    assert rows["msg/s", "unpinned"][0] == "pika cast c=10"
    # a share that may be negative has no coefficient of variation
    assert rows["mqlab share %", "unpinned"][3:7] == ["-5.0 / 10.0", "2.5", "15.0", "-"]
    # the machine's state in each window beside the figures
    assert rows["others' CPU %", "pinned"][3:5] == ["6.0 / 8.0", "7.0"]
    assert done.stdout.count("Measured with") == 1  # one environment, said once


def test_the_spread_table_names_the_scenario_when_two_share_a_driver_pattern_and_load(
    tmp_path: Path,
) -> None:
    steps = [_step("pika", "cast", 900.0, scenario="durable"),
             _step("pika", "cast", 500.0, scenario="transient")]  # fmt: skip
    done = mqlab("show", *_runs(tmp_path, ("r", steps, False)), "--markdown", "--table", "spread")
    assert done.returncode == 0, done.stderr
    firsts = [c.split("|")[1].strip() for c in done.stdout.splitlines() if "| msg/s" in c]
    assert firsts == ["pika cast c=10 (durable)", "pika cast c=10 (transient)"]


def test_several_runs_are_read_only_by_the_spread_table(tmp_path: Path) -> None:
    paths = _runs(tmp_path, ("a", [_step("kombu")], False), ("b", [_step("kombu")], False))
    done = mqlab("show", *paths, "--markdown")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        "mqlab: 2 results files: only --table spread reads more than one; give one file"
    )


def test_the_figures_script_expands_a_glob_of_stored_runs_in_name_order() -> None:
    argv = _script().checked("mqlab show docs/runs/pinning/ceiling-*.json.gz --table spread "
                             "--markdown")  # fmt: skip
    runs = [a for a in argv if a.endswith(".json.gz")]
    assert len(runs) >= 2 and runs == sorted(runs)
    assert all(r.startswith("docs/runs/pinning/ceiling-") for r in runs)
