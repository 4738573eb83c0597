from __future__ import annotations

from pathlib import Path

import pytest

from mqlab.config.profile import load_profile, parse_duration
from mqlab.errors import ProfileError

from .helpers import mqlab, write_profile

GOOD = """
[run]
name = "t"
duration = "2s"
warmup = "500ms"

[broker]
url = "amqp://guest:secret@127.0.0.1:5672/"

[drivers.lb]
plugin = "loopback"

[defaults]
serializer = "msgpack"
envelope = false
message_size = "64..128"

[[scenario]]
pattern = "call"
concurrency = [1, 5]

[[scenario]]
pattern = "notify"
rate = 100
pools = 2
servers = 2
durable = true
"""


def test_good_profile_parses_into_typed_values(tmp_path: Path) -> None:
    p = load_profile(write_profile(tmp_path / "p.toml", GOOD))
    assert p.run.duration == 2.0 and p.run.warmup == 0.5
    assert p.drivers[0].plugin == "loopback"
    call, notify = p.scenarios
    assert call.concurrency == (1, 5) and call.rate == ()
    assert call.serializer == "msgpack" and call.envelope is False
    assert call.message_size.bins == ((64, 128, 1),)
    assert call.exchange == "openstack"
    assert notify.rate == (100.0,) and notify.pools == 2 and notify.durable
    assert notify.exchange == "notifications"


def test_managed_cluster_size_is_read(tmp_path: Path) -> None:
    text = GOOD.replace("[broker]\n", "[broker]\nmanaged = true\nnodes = 3\n")
    assert load_profile(write_profile(tmp_path / "p.toml", text)).broker.nodes == 3
    assert load_profile(write_profile(tmp_path / "q.toml", GOOD)).broker.nodes == 1


@pytest.mark.parametrize(
    ("text", "value"), [("20s", 20.0), ("500ms", 0.5), ("2m", 120.0), (3, 3.0), ("1.5s", 1.5)]
)
def test_durations(text: object, value: float) -> None:
    assert parse_duration(text) == value


BAD = {
    "unknown key": ("[run]\nspeed = 3\n", "run.speed", "unknown key"),
    "wrong type": ('[run]\nrepeat = "two"\n', "run.repeat", "whole number"),
    "bad duration": ('[run]\nduration = "ten"\n', "run.duration", "duration"),
    "negative": ("[run]\nrepeat = -1\n", "run.repeat", ">= 1"),
    "empty drivers": ("[drivers]\n", "drivers", "at least one"),
    "unknown pattern": (None, "scenario[0].pattern", "call, cast, notify"),
    "both loads": (None, "scenario[0].concurrency", "exactly one"),
    "neither load": (None, "scenario[0].concurrency", "exactly one"),
    "negative servers": (None, "scenario[0].servers", ">= 0"),
    "bad size": (None, "scenario[0].message_size", "byte count"),
    "too many nodes": ("[broker]\nmanaged = true\nnodes = 6\n", "broker.nodes", "1 to 5 nodes"),
    "no nodes": ("[broker]\nmanaged = true\nnodes = 0\n", "broker.nodes", ">= 1"),
    "nodes unmanaged": ("[broker]\nnodes = 3\n", "broker.nodes", "managed = true"),
}

SCENARIOS = {
    "unknown pattern": 'pattern = "publish"\nconcurrency = 1',
    "both loads": 'pattern = "cast"\nconcurrency = 1\nrate = 10',
    "neither load": 'pattern = "cast"',
    "negative servers": 'pattern = "cast"\nconcurrency = 1\nservers = -1',
    "bad size": 'pattern = "cast"\nconcurrency = 1\nmessage_size = "big"',
}


def _bad_text(case: str) -> str:
    text, _, _ = BAD[case]
    if text is not None:
        base = (
            '[drivers.lb]\nplugin = "loopback"\n[[scenario]]\npattern = "cast"\nconcurrency = 1\n'
        )
        if text.startswith("[drivers]"):
            return text + '[[scenario]]\npattern = "cast"\nconcurrency = 1\n'
        return text + base
    return '[drivers.lb]\nplugin = "loopback"\n[[scenario]]\n' + SCENARIOS[case] + "\n"


@pytest.mark.parametrize("case", sorted(BAD))
def test_each_malformed_profile_names_file_field_and_expectation(tmp_path: Path, case: str) -> None:
    _, field, words = BAD[case]
    path = write_profile(tmp_path / "bad.toml", _bad_text(case))
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert info.value.field == field
    assert words in str(info.value)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("case", ["unknown key", "bad duration", "both loads", "unknown pattern"])
def test_cli_exits_2_with_one_line_and_no_traceback(
    tmp_path: Path, command: str, case: str
) -> None:
    path = write_profile(tmp_path / "bad.toml", _bad_text(case))
    proc = mqlab(command, str(path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert BAD[case][1] in lines[0]


def test_syntax_error_unreadable_file_unknown_plugin_and_option(tmp_path: Path) -> None:
    syntax = write_profile(tmp_path / "syntax.toml", "[run\nname = 1\n")
    proc = mqlab("validate", str(syntax))
    assert proc.returncode == 2 and "TOML syntax error" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1

    proc = mqlab("validate", str(tmp_path / "missing.toml"))
    assert proc.returncode == 2 and "cannot read the profile" in proc.stderr

    plugin = write_profile(
        tmp_path / "plugin.toml",
        '[drivers.x]\nplugin = "nosuch"\n[[scenario]]\npattern = "cast"\nconcurrency = 1\n',
    )
    proc = mqlab("validate", str(plugin))
    assert proc.returncode == 2
    assert "drivers.x.plugin" in proc.stderr and "unknown plugin 'nosuch'" in proc.stderr
    assert "loopback" in proc.stderr  # lists what is installed

    option = write_profile(
        tmp_path / "option.toml",
        '[drivers.x]\nplugin = "loopback"\nspeed = 3\n[[scenario]]\npattern = "cast"\n'
        "concurrency = 1\n",
    )
    proc = mqlab("validate", str(option))
    assert proc.returncode == 2 and "drivers.x.speed" in proc.stderr
    assert "not supported" in proc.stderr


def test_validate_reports_the_plan(tmp_path: Path) -> None:
    # loopback keeps nothing durable: mqlab refuses durable = true for it (issue 36)
    text = GOOD.replace("durable = true\n", "")
    proc = mqlab("validate", str(write_profile(tmp_path / "p.toml", text)))
    assert proc.returncode == 0, proc.stderr
    assert "3 step(s)" in proc.stdout


def test_every_shipped_profile_validates(capsys: pytest.CaptureFixture[str]) -> None:
    from mqlab.console.cli import main

    # `mqlab validate` in this process: the same command, without 30 interpreters' start-up
    root = Path(__file__).resolve().parent.parent / "profiles"
    for path in sorted(root.glob("*.toml")):
        code = main(["validate", str(path)])
        said = capsys.readouterr()
        assert code == 0, f"{path.name}: {said.err}"
        assert ": ok: " in said.out, f"{path.name}: {said.out}"
