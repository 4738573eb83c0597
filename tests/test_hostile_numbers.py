"""Numbers of any size in a profile (issue 33, class 2).

Every integer of a profile is range-checked before any field converts it: a 400-digit
integer used to crash ``validate`` with OverflowError, a 5,000-digit one with ValueError,
and a huge weight in a ``message_size`` table passed ``validate`` and crashed ``run``.
Each neighbour of the failing shape (the same field as a list, a string, NaN) is refused
in one line too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mqlab.console.cli import main

from .helpers import mqlab, write_profile
from .hostile import QUICK, refused

TEMPLATE = """[run]
{run}
[broker]
{broker}
[drivers.lb]
plugin = "loopback"
{driver}
[[scenario]]
pattern = "cast"
{scenario}
"""

# field -> (table it sits in, the path the refusal names)
FIELDS = {
    "repeat": ("run", "run.repeat"),
    "processes": ("run", "run.processes"),
    "duration": ("run", "run.duration"),
    "warmup": ("run", "run.warmup"),
    "drain": ("run", "run.drain"),
    "nodes": ("broker", "broker.nodes"),
    "queue_size": ("driver", "drivers.lb.queue_size"),
    "concurrency": ("scenario", "scenario[0].concurrency"),
    "rate": ("scenario", "scenario[0].rate"),
    "servers": ("scenario", "scenario[0].servers"),
    "pools": ("scenario", "scenario[0].pools"),
    "targets": ("scenario", "scenario[0].targets"),
    "timeout": ("scenario", "scenario[0].timeout"),
    "message_size": ("scenario", "scenario[0].message_size"),
}

HUGE = {
    "400 digits": "1" + "0" * 400,
    "-400 digits": "-" + "9" * 400,
    "2**63": str(2**63),
}


def _profile(field: str, value: str) -> str:
    parts = {"run": "", "broker": "", "driver": "", "scenario": ""}
    table, _ = FIELDS[field]
    if field not in ("concurrency", "rate"):
        parts["scenario"] = "concurrency = 1\n"
    parts[table] += f"{field} = {value}\n"
    return TEMPLATE.format(**parts)


def _validate(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> str:
    path = write_profile(tmp_path / "p.toml", text)
    code = main(["validate", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mqlab: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("size", list(HUGE))
@pytest.mark.parametrize("field", list(FIELDS))
def test_a_huge_integer_in_any_field_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, size: str
) -> None:
    line = _validate(tmp_path, _profile(field, HUGE[size]), capsys)
    assert f": {FIELDS[field][1]}: " in line and "64-bit range" in line, line


@pytest.mark.parametrize("field", list(FIELDS))
def test_an_integer_too_long_to_read_is_refused_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str
) -> None:
    line = _validate(tmp_path, _profile(field, "7" * 5000), capsys)
    assert "a whole number of 5,000 digits" in line and "line " in line, line


@pytest.mark.parametrize("shape", ['["x"]', '"x"', "nan", "[nan]", "{ a = 1 }", "true"])
@pytest.mark.parametrize("field", list(FIELDS))
def test_the_same_field_as_a_list_text_or_nan_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, shape: str
) -> None:
    if field == "message_size" and shape == '"x"':
        shape = '"x..y"'  # a bare word is a built-in table's name
    line = _validate(tmp_path, _profile(field, shape), capsys)
    assert FIELDS[field][1] in line, line


def test_huge_numbers_deep_in_tables_are_refused_naming_the_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    weight = _profile("concurrency", "1").replace(
        "concurrency = 1", "concurrency = 1\nmessage_size = [[10, 3], [20, " + "9" * 30 + "]]"
    )
    assert "scenario[0].message_size[1][1]: " in _validate(tmp_path, weight, capsys)
    event = (
        '[run]\nduration = "20s"\n[broker]\nmanaged = true\nnodes = 3\n'
        '[drivers.kombu]\nplugin = "kombu"\nretry = 3\n[[scenario]]\npattern = "cast"\n'
        'rate = 10\n[[scenario.event]]\nat = "5s"\naction = "delay"\nnode = "node2"\n'
        f"ms = {HUGE['400 digits']}\n"
    )
    assert "scenario[0].event[0].ms: " in _validate(tmp_path, event, capsys)


def test_a_size_weight_is_bounded_and_the_largest_one_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = "[[64, 1000000000], [128, 1]]"
    over = _profile("concurrency", "1").replace(
        "concurrency = 1", "concurrency = 1\nmessage_size = [[64, 1000000001], [128, 1]]"
    )
    line = _validate(tmp_path, over, capsys)
    assert "scenario[0].message_size" in line and "weight 1 .. 1,000,000,000" in line, line
    # the largest weight validate accepts is one run measures (it once crashed in run)
    ok = write_profile(
        tmp_path / "ok.toml",
        QUICK + '[drivers.lb]\nplugin = "loopback"\n[[scenario]]\npattern = "cast"\n'
        f"concurrency = 1\nmessage_size = {table}\n",
    )
    proc = mqlab("run", str(ok), "-o", str(tmp_path / "r.json"), "-q")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    refused(mqlab("run", str(write_profile(tmp_path / "bad.toml", over))), "message_size")
