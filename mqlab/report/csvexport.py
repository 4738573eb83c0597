"""``mqlab export RESULTS.json --csv DIR``: a run as two CSV files for pandas or a spreadsheet.

``<stem>.steps.csv`` holds one row per step (its counts, throughput, latency, CPU, flags)
and ``<stem>.series.csv`` one row per second of each step's per-second series. Both are
read from the results file through :mod:`mqlab.results.read`; a figure the file does not
hold is an empty cell, never a made-up 0. A name a spreadsheet would run as a formula is
written behind a quote (``'=cmd``); both files are replaced together or not at all.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from pathlib import Path

from mqlab.record.step import StepRecord
from mqlab.record.values import PERCENTILES, Series
from mqlab.results import paths
from mqlab.results.record import Run

#: the columns every step row has (error kinds follow, one ``errors:<kind>`` column each)
STEP_COLUMNS = (
    "step", "driver", "plugin", "scenario", "pattern", "concurrency", "rate", "repeat",
    "message_size", "status", "sent", "received", "round_trip", "lost", "duplicates",
    "out_of_order", "unaccounted", "still_queued", "held", "unexplained", "errors",
    "throughput_mean", "throughput_stdev", "throughput_seconds", "latency_kind",
    *(f"{p}_ms" for p in PERCENTILES), "latency_count", "failed", "failed_percent",
    "failed_attempts", "censored", "cpu_clients_percent", "cpu_servers_percent",
    "cpu_broker_percent", "flags", "contended", "unstable", "others_percent", "steal_percent",
    "run_queue", "rate_cv_percent", "trust",
)  # fmt: skip
#: the columns that name a second of a step; its series' columns follow
SERIES_KEYS = ("step", "driver", "plugin", "scenario", "pattern", "concurrency", "rate")
#: the series columns in the order the results file documents them; others follow
_SERIES_ORDER = ("sent", "received", "round_trip", "errors", "p50_ms", "p99_ms")


class Refused(ValueError):
    """The CSV files cannot go where asked; the message says why and what to do."""


#: what a spreadsheet reads as the start of a formula (a tab or carriage return first is
#: read past, the rest then as a formula): OWASP's CSV-injection list
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _cell(v: object) -> object:
    """A cell as written: empty for a missing figure; a text that a spreadsheet would run as
    a formula (``=HYPERLINK(...)`` as a driver's name) kept as text behind a quote. Numbers
    are written as they are (a warm-up second is ``-2``)."""
    if v is None:
        return ""
    if isinstance(v, str) and v.startswith(_FORMULA):
        return "'" + v
    return v


def _whole(v: float) -> float | int:
    return int(v) if float(v).is_integer() else v


def _ours(path: Path) -> bool:
    """A CSV file ``mqlab export`` wrote: it starts with one of its headers."""
    try:
        with path.open("rb") as f:
            head = f.read(64)
    except OSError:
        return False
    return head.startswith(b"step,driver,plugin,")


def _trust(s: StepRecord) -> list[object]:
    """How far to trust the step (empty cells in a file from before issue 42)."""
    t = s.trust
    if t is None:
        return [None] * 7
    return [
        int(t.contended), int(t.unstable), t.others_percent, t.steal_percent, t.run_queue,
        t.cv_percent, t.text,
    ]  # fmt: skip


def step_rows(steps: Sequence[StepRecord]) -> tuple[list[str], list[list[object]]]:
    kinds = sorted({k for s in steps for k in s.figures.errors})
    head = [*STEP_COLUMNS, *(f"errors:{k}" for k in kinds)]
    rows: list[list[object]] = []
    for s in steps:
        c, f, a = s.cell, s.figures, s.losses.account
        lat, thr, cpu = f.latency_ms, f.throughput, f.cpu
        row = [
            s.step + 1, c.driver, c.plugin, c.scenario, c.pattern, c.concurrency, c.rate,
            s.repeat + 1, c.message_size, f.status, f.sent, f.received,
            f.round_trip if c.pattern == "call" else None, f.lost, f.duplicates, f.out_of_order,
            f.unaccounted, s.drain.still_queued, a.held if a else None,
            a.unexplained if a else None, f.error_count, thr.mean, thr.stdev, thr.seconds,
            lat.kind, *(lat.get(p) for p in PERCENTILES), lat.count, lat.failed,
            lat.failed_percent, f.work.failed_attempts if f.work else None,
            " ".join(lat.censored),
            cpu.clients_percent, cpu.servers_percent, cpu.broker_percent,
            " ".join(flag.code for flag in s.flags), *_trust(s),
            *(f.errors.get(k, 0) for k in kinds),
        ]  # fmt: skip
        rows.append([_cell(v) for v in row])
    return head, rows


def _columns(series: Series) -> dict[str, tuple[float | None, ...]]:
    """The series' columns that hold any second (an older file has fewer)."""
    return {c: series.column(c) for c in _SERIES_ORDER if series.column(c)}


def series_rows(steps: Sequence[StepRecord]) -> tuple[list[str], list[list[object]]]:
    """One row a second: ``t_s`` is seconds from the window's start (negative: warm-up)."""
    found = {c for s in steps if s.figures.series for c in _columns(s.figures.series)}
    columns = [c for c in _SERIES_ORDER if c in found]
    head = [*SERIES_KEYS, "second", "t_s", *columns]
    rows: list[list[object]] = []
    for s in steps:
        series = s.figures.series
        if series is None:
            continue
        c = s.cell
        n = max((len(series.column(name)) for name in columns), default=0)
        for i in range(n):
            values = [
                series.column(name)[i] if i < len(series.column(name)) else None for name in columns
            ]
            # counts are whole numbers: written as 12, not 12.0
            values = [_whole(v) if isinstance(v, float) else v for v in values]
            row = [
                s.step + 1, c.driver, c.plugin, c.scenario, c.pattern, c.concurrency, c.rate,
                i, _whole(series.t0_offset_s + i), *values,
            ]  # fmt: skip
            rows.append([_cell(v) for v in row])
    return head, rows


def _text(head: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(head)
    writer.writerows(rows)
    return buf.getvalue()


def targets(run: Run, directory: Path) -> tuple[Path, Path]:
    stem = paths.safe_stem(run.path.stem)
    return directory / f"{stem}.steps.csv", directory / f"{stem}.series.csv"


def write(run: Run, directory: Path) -> tuple[tuple[Path, int], tuple[Path, int]]:
    """Write both files; each path with its number of rows. Raises Refused, OSError."""
    steps_path, series_path = targets(run, directory)
    if directory.exists() and not directory.is_dir():
        raise Refused(f"{directory} is not a directory: give a directory with --csv")
    for path in (steps_path, series_path):
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise Refused(f"{path} is not a regular file: give another directory with --csv")
        if path.exists() and path.stat().st_size and not _ours(path):
            raise Refused(
                f"{path} exists and is not a CSV file mqlab wrote; mqlab will not overwrite it "
                "(give another directory with --csv)"
            )
    directory.mkdir(parents=True, exist_ok=True)
    (steps_head, steps), (series_head, series) = step_rows(run.steps), series_rows(run.steps)
    # never half a file, and never one file of this export beside the other of an older one
    paths.replace_all_atomically(
        [(steps_path, _text(steps_head, steps)), (series_path, _text(series_head, series))],
        ".csv-",
    )
    return (steps_path, len(steps)), (series_path, len(series))
