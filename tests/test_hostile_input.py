"""Careless and hostile input is refused before anything starts (issue 19, classes 4, 5, 7, 8).

Each refusal is exit status 2 and one line naming the field and the limit, never a
traceback, whatever the value: infinities, absurd counts, malformed URLs, deep
nesting, devices instead of files.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from mqlab.config import limits
from mqlab.console.cli import main

from .helpers import mqlab, write_profile
from .hostile import LOOPBACK, QUICK, refused

SCENARIO = '[drivers.lb]\nplugin = "loopback"\n[[scenario]]\npattern = "cast"\n'


def _validate(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = write_profile(tmp_path / "p.toml", text)
    code = main(["validate", str(path)])
    captured = capsys.readouterr()
    return code, captured.err


# (profile text, field the line names, words it holds)
BAD = {
    # class 5: numbers that are not numbers
    "inf duration": ("[run]\nduration = inf\n" + LOOPBACK, "run.duration", "finite"),
    "nan duration": ("[run]\nduration = nan\n" + LOOPBACK, "run.duration", "finite"),
    "-inf warmup": ("[run]\nwarmup = -inf\n" + LOOPBACK, "run.warmup", "finite"),
    "nan drain": ("[run]\ndrain = nan\n" + LOOPBACK, "run.drain", "finite"),
    "inf timeout": (SCENARIO + "concurrency = 1\ntimeout = inf\n", "timeout", "finite"),
    "nan rate": (SCENARIO + "rate = nan\n", "rate", "finite numbers"),
    "inf rate": (SCENARIO + "rate = [10, inf]\n", "rate", "finite numbers"),
    "huge duration": ("[run]\nduration = 1e300\n" + LOOPBACK, "run.duration", "limit"),
    "week string": ('[run]\nduration = "200h"\n' + LOOPBACK, "run.duration", "limit of 86,400"),
    # class 4: absurd sizes and counts
    "repeat": ("[run]\nrepeat = 1000000000\n" + LOOPBACK, "run.repeat", "limit of 100"),
    "message size": (
        LOOPBACK + "message_size = 200000000\n",
        "message_size",
        "limit of 16,777,216",
    ),
    "size range": (LOOPBACK + 'message_size = "1..999999999"\n', "message_size", "limit"),
    "size table": (LOOPBACK + "message_size = [[99999999, 1]]\n", "message_size", "limit"),
    "rate": (SCENARIO + "rate = 1e12\n", "rate", "limit of 10,000,000"),
    "levels": (SCENARIO + f"concurrency = {list(range(1, 200))}\n", "concurrency", "limit"),
    "scenarios": (
        LOOPBACK + '[[scenario]]\npattern = "cast"\nconcurrency = 1\n' * 100,
        "scenario",
        "limit is 100",
    ),
    "servers": (SCENARIO + "concurrency = 1\nservers = 100000\n", "servers", "limit of 64"),
    # class 8: settings the machine cannot honour
    "concurrency": (SCENARIO + "concurrency = 1000000\n", "concurrency", "per process"),
    "processes": ("[run]\nprocesses = 1000\n" + LOOPBACK, "run.processes", "per CPU core"),
    # class 7: malformed things
    "ipv6 bracket": ('[broker]\nurl = "amqp://u:p@[::1:5672/"\n' + LOOPBACK, "broker.url", "IPv6"),
    "port 99999": ('[broker]\nurl = "amqp://h:99999/"\n' + LOOPBACK, "broker.url", "range"),
    "port abc": ('[broker]\nurl = "amqp://h:abc/"\n' + LOOPBACK, "broker.url", "port"),
    "port 0": ('[broker]\nurl = "amqp://h:0/"\n' + LOOPBACK, "broker.url", "port 0"),
    "ftp": (
        '[broker]\nurl = "ftp://h/"\n[drivers.p]\nplugin = "pika"\n[[scenario]]\n'
        'pattern = "cast"\nconcurrency = 1\n',
        "broker.url",
        "is not one plugin 'pika' (driver 'p') takes: amqp://, amqps://",
    ),
    "scheme": ('[broker]\nurl = "1ftp://h/"\n' + LOOPBACK, "broker.url", "is not a URL scheme"),
    "no host": ('[broker]\nurl = "amqp:///vhost"\n' + LOOPBACK, "broker.url", "no host"),
    "space in url": ('[broker]\nurl = "amqp://h /"\n' + LOOPBACK, "broker.url", "space"),
    "driver url": (
        '[drivers.lb]\nplugin = "loopback"\nurl = "amqp://[::1/"\n[[scenario]]\n'
        'pattern = "cast"\nconcurrency = 1\n',
        "drivers.lb.url",
        "IPv6",
    ),
    "long topic": (SCENARIO + f'concurrency = 1\ntopic = "{"t" * 300}"\n', "topic", "limit"),
    "topic bytes": (SCENARIO + f'concurrency = 1\ntopic = "{"é" * 100}"\n', "topic", "bytes"),
    "topic space": (SCENARIO + 'concurrency = 1\ntopic = "a b"\n', "topic", "space"),
    "empty driver": (
        '[drivers.""]\nplugin = "loopback"\n[[scenario]]\npattern = "cast"\nconcurrency = 1\n',
        "drivers.''",
        "non-empty driver name",
    ),
    "blank name": ('[run]\nname = "   "\n' + LOOPBACK, "run.name", "non-empty"),
    "long name": (f'[run]\nname = "{"n" * 65}"\n' + LOOPBACK, "run.name", "limit is 64"),
    "escape in name": ('[run]\nname = "a\\u001b[2Jb"\n' + LOOPBACK, "run.name", "\\x1b"),
    "bell in driver": (
        '[drivers."a\\u0007"]\nplugin = "loopback"\n[[scenario]]\npattern = "cast"\n'
        "concurrency = 1\n",
        "drivers.'a\\x07'",
        "\\x07",
    ),
    "newline in scenario": (LOOPBACK + 'name = "a\\nb"\n', "name", "\\n"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_absurd_or_malformed_values_are_refused_with_the_limit_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    text, field, words = BAD[case]
    code, err = _validate(tmp_path, text, capsys)
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and words in lines[0], err
    assert f": {field}: " in lines[0] or f".{field}: " in lines[0], err


def test_limits_are_not_refusals_of_ordinary_profiles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        '[run]\nname = "nightly [eu-1] / ünïcode"\nduration = "1h"\nrepeat = 100\n'
        '[broker]\nurl = ["amqp://u:p%23w@[::1]:5672/", "amqps://h", "amqp://u:a#b/c?d@h:1/v"]\n'
        '[drivers.lb]\nplugin = "loopback"\n[[scenario]]\npattern = "cast"\n'
        f"concurrency = {limits.MAX_CONCURRENCY_PER_PROCESS}\n"
        f'message_size = {limits.MAX_MESSAGE_BYTES}\ntopic = "{"t" * 128}"\n'
    )
    code, err = _validate(tmp_path, text, capsys)
    assert code == 0, err


def test_deep_nesting_devices_and_huge_files_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = write_profile(tmp_path / "deep.toml", "a = " + "[" * 600 + "]" * 600 + "\n")
    assert main(["validate", str(deep)]) == 2
    assert "nested too deeply" in capsys.readouterr().err
    tables = write_profile(tmp_path / "t.toml", "x = " + "{a = " * 600 + "1" + "}" * 600 + "\n")
    assert main(["validate", str(tables)]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
    big = write_profile(tmp_path / "big.toml", "# " + "x" * limits.MAX_PROFILE_BYTES + "\n")
    assert main(["validate", str(big)]) == 2
    assert "1,048,576 bytes" in capsys.readouterr().err
    # /dev/zero never ends: read up to the limit, then refused
    proc = mqlab("validate", "/dev/zero", timeout=30)
    refused(proc, "larger than")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--duration", "0"], "run.duration"),
        (["--duration", "inf"], "--duration"),
        (["--duration", "nan"], "--duration"),
        (["--duration", "abc"], "--duration"),
        (["--warmup", "-1"], "--warmup"),
        (["--processes", "0"], "--processes"),
        (["--processes", "99999"], "run.processes"),
        (["--broker", "amqp://h:99999/"], "--broker"),
        (["--broker", "1ftp://h/"], "--broker"),
        (["--frobnicate"], "run: unrecognized arguments: --frobnicate (see mqlab run --help)"),
    ],
)
def test_command_line_values_meet_the_profiles_rules_in_one_line(
    tmp_path: Path, args: list[str], words: str
) -> None:
    path = write_profile(tmp_path / "p.toml", QUICK + LOOPBACK)
    proc = mqlab("run", str(path), "-o", str(tmp_path / "r.json"), *args)
    refused(proc, words)
    assert not (tmp_path / "r.json").exists()


def test_a_bad_command_is_one_line_too() -> None:
    refused(mqlab("frobnicate"), "invalid choice")
    refused(mqlab("broker", "explode"), "invalid choice")


#: every command with the arguments it needs, so that only the stray option is wrong
#: (nothing runs: the refusal comes first)
COMMANDS = {
    "run": ["p.toml"],
    "ceiling": ["p.toml"],
    "validate": ["p.toml"],
    "show": ["r.json"],
    "report": ["r.json"],
    "compare": ["a.json", "b.json"],
    "export": ["r.json", "--csv", "out"],
    "hosts": ["certs", "dir"],
    "plugins": [],
    "broker": ["status"],
    "system": [],
    "selftest": [],
}


def test_every_command_the_cli_offers_is_checked_below(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["frobnicate"])
    offered = capsys.readouterr().err.partition("choose from")[2].partition(")")[0]
    assert set(re.findall(r"[a-z][\w-]*", offered)) == set(COMMANDS), offered


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_unknown_option_is_refused_by_the_command_it_was_given_to(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, *COMMANDS[command], "--frobnicate"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        f"mqlab: {command}: unrecognized arguments: --frobnicate (see mqlab {command} --help)\n"
    )


def test_ctrl_c_while_mqlab_starts_up_is_one_line(tmp_path: Path) -> None:
    # the console script's first import is interrupted: no KeyboardInterrupt traceback
    code = (
        "import signal, sys, os\n"
        "import builtins\n"
        "real = builtins.__import__\n"
        "def interrupted(name, *a, **k):\n"
        "    if name == 'mqlab.console.cli':\n"
        "        raise KeyboardInterrupt\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = interrupted\n"
        "from mqlab.console.entry import main\n"
        "sys.exit(main())\n"
    )
    import sys

    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 130
    assert proc.stderr == "mqlab: interrupted\n"
