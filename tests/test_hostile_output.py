"""What mqlab writes and shows under careless and hostile input (issue 19, classes 1-3, 5-7).

No file is destroyed or shared, no secret reaches any output, the results file is
always strict JSON and survives a failing disk, and user text is shown as text.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mqlab.console.cli import main
from mqlab.results import paths

from .helpers import ROOT, mqlab, write_profile
from .hostile import LOOPBACK, QUICK, files_under, quick_run, refused, strict_json

SECRETS = ("s3cr#t/pw?x", "s3cr%23t%2Fpw%3Fx", "hunter2@x")
SECRET_PROFILE = f"""{QUICK}
[broker]
url = ["amqp://u:{SECRETS[0]}@127.0.0.1:1/", "amqp://u:{SECRETS[1]}@127.0.0.1:1/"]
[drivers.lb]
plugin = "loopback"
[drivers.z]
plugin = "zmq"
redis_url = "redis://:{SECRETS[2]}@127.0.0.1:1/0"
[[scenario]]
pattern = "cast"
concurrency = 1
drivers = ["lb"]
"""


def _leaks(text: str) -> list[str]:
    return [s for s in (*SECRETS, "s3cr", "hunter2") if s in text]


# -- class 1: secrets ----------------------------------------------------------------


def test_no_secret_on_screen_or_in_the_results_file(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = mqlab("run", str(write_profile(tmp_path / "p.toml", SECRET_PROFILE)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert not _leaks(proc.stdout + proc.stderr + text)
    doc = strict_json(out)
    zmq = next(d for d in doc["profile"]["drivers"] if d["name"] == "z")
    # masked, not dropped: the reader still sees which server was meant
    assert dict(zmq["options"])["redis_url"] == "redis://:***@127.0.0.1:1/0"
    assert "amqp://u:***@127.0.0.1:1/" in doc["profile"]["broker"]["urls"]


def test_no_secret_in_error_lines_or_logs(tmp_path: Path) -> None:
    # a refusal that quotes the URL, then a failure that quotes it in free text
    bad = SECRET_PROFILE.replace("127.0.0.1:1/0", "127.0.0.1:99999/0").replace(
        'redis_url = "redis', 'bogus_option = "redis'
    )
    proc = mqlab("validate", str(write_profile(tmp_path / "p.toml", bad)))
    assert proc.returncode == 2 and not _leaks(proc.stderr), proc.stderr
    from mqlab import redact

    redact.remember([f"amqp://u:{SECRETS[0]}@h/"], [("api_token", "tok-123456")])
    line = redact.scrub(f"login failed for amqp://u:{SECRETS[0]}@h/ (password {SECRETS[0]})")
    assert not _leaks(line) and "tok-123456" not in redact.scrub("auth tok-123456 refused")
    # a password that is its own user name is shown with the user anyway: names stay readable
    redact.remember(["amqp://guest:guest@h/"])
    assert redact.scrub("login refused for user guest") == "login refused for user guest"
    # a library's log record goes through the same scrubbing
    proc = subprocess.run(
        [sys.executable, "-c",
         "import logging, sys\nfrom mqlab import redact\n"
         f"redact.remember(['amqp://u:{SECRETS[0]}@h/'])\nredact.scrub_logs()\n"
         f"logging.getLogger('pika').error('auth %s failed', {SECRETS[0]!r})\n"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert "auth *** failed" in proc.stderr and not _leaks(proc.stderr)


def test_login_failure_against_a_real_broker_never_shows_the_password(
    tmp_path: Path, broker: object
) -> None:
    url = broker.url.replace("guest:guest@", "guest:wr%23ng%2Fpa%3Fss@")  # type: ignore[attr-defined]
    profile = (
        f'{QUICK}[broker]\nurl = "{url}"\n[drivers.p]\nplugin = "pika"\n'
        '[[scenario]]\npattern = "cast"\nconcurrency = 1\n'
    )
    out = tmp_path / "r.json"
    proc = mqlab("run", str(write_profile(tmp_path / "p.toml", profile)), "-o", str(out))
    everything = proc.stdout + proc.stderr + (out.read_text() if out.exists() else "")
    assert proc.returncode != 0 and "Traceback" not in everything
    for form in ("wr#ng", "pa?ss", "wr%23ng", "pa%3Fss"):
        assert form not in everything


# -- class 2: files destroyed or mixed ---------------------------------------------


@pytest.mark.parametrize("target", ["/dev/null", "profile", "foreign", "directory", "fifo"])
def test_output_never_replaces_what_mqlab_did_not_write(tmp_path: Path, target: str) -> None:
    profile = write_profile(tmp_path / "p.toml", QUICK + LOOPBACK)
    device = tmp_path / "null"
    try:  # a private copy of /dev/null: a broken policy must not take the machine's
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        device = Path("/dev/null")
    paths = {
        "/dev/null": device,
        "profile": profile,
        "foreign": write_profile(tmp_path / "notes.txt", "my notes\n"),
        "directory": tmp_path,
        "fifo": tmp_path / "fifo",
    }
    if target == "fifo":
        os.mkfifo(paths["fifo"])
    path = paths[target]
    before = path.stat() if path.exists() else None
    refused(mqlab("run", str(profile), "-o", str(path)), str(path))
    if before is not None and path.is_file():
        assert path.stat().st_mtime_ns == before.st_mtime_ns and path.stat().st_ino == before.st_ino
    assert device.is_char_device() and Path("/dev/null").is_char_device()


def test_a_results_file_mqlab_wrote_may_be_written_again(tmp_path: Path) -> None:
    profile = write_profile(tmp_path / "p.toml", QUICK + LOOPBACK)
    out = tmp_path / "r.json"
    for _ in range(2):
        proc = mqlab("run", str(profile), "-o", str(out), "-q")
        assert proc.returncode == 0, proc.stderr
    assert strict_json(out)["status"] == "done"
    assert {p.name for p in tmp_path.iterdir()} == {"p.toml", "r.json"}  # no lock left


def test_two_runs_never_share_a_results_file(tmp_path: Path) -> None:
    profile = write_profile(tmp_path / "p.toml", QUICK.replace('"1s"', '"4s"', 1) + LOOPBACK)
    out = tmp_path / "r.json"
    first = subprocess.Popen(
        [sys.executable, "-m", "mqlab.console.cli", "run", str(profile), "-o", str(out), "-q"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        refused(mqlab("run", str(profile), "-o", str(out)), "another mqlab run")
    finally:
        _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    doc = strict_json(out)
    assert doc["status"] == "done" and len(doc["steps"]) == 1


HOSTILE_NAMES = ["../../escape", "/tmp/abs", "a/b/c", "..", ".hidden", "ü [x]"]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_run_names_default_path_is_a_safe_name_inside_results(name: str) -> None:
    path = paths.default_path(name)
    assert path.parent == Path("results") and path.suffix == ".json"
    assert not path.name.startswith(".") and "/" not in path.name and ".." not in path.name


def test_default_results_path_stays_in_results_with_a_safe_name(tmp_path: Path) -> None:
    """Two runs of a hostile name in the same second: two files, both in ./results (every
    other name's path: the test above; one run each is what a user sees, seconds apiece)."""
    name = HOSTILE_NAMES[0]
    work = tmp_path / "deep" / "work"
    work.mkdir(parents=True)
    profile = write_profile(work / "p.toml", f"[run]\nname = {json.dumps(name)}\n" +
                            QUICK.removeprefix("[run]\n") + LOOPBACK)  # fmt: skip
    before = files_under(tmp_path)
    procs = [mqlab("run", str(profile), "-q", cwd=work) for _ in range(2)]  # same second
    for proc in procs:
        assert proc.returncode == 0, proc.stderr
    made = files_under(tmp_path) - before
    written = sorted(p for p in made if p.is_file())
    assert len(written) == 2, made
    for p in written:
        assert p.parent == work / "results" and p.suffix == ".json"
        assert not p.name.startswith(".") and "/" not in p.name and ".." not in p.name


# -- class 3: a full disk ------------------------------------------------------------


def test_full_disk_keeps_the_last_good_file_and_the_measured_figures(tmp_path: Path) -> None:
    profile = write_profile(
        tmp_path / "p.toml",
        QUICK + '[drivers.lb]\nplugin = "loopback"\n[[scenario]]\npattern = "cast"\n'
        "concurrency = [1, 2]\n",
    )
    out = tmp_path / "r.json"
    empty = mqlab("run", str(profile), "-o", str(tmp_path / "size.json"), "-q", "--duration", "1s")
    assert empty.returncode == 0
    # room for the run's first file, not for a step: writes beyond fail like ENOSPC
    first = {k: v for k, v in strict_json(tmp_path / "size.json").items() if k != "steps"}
    limit = len(json.dumps(first, indent=1)) + 1000

    def small_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run(
        [sys.executable, "-m", "mqlab.console.cli", "run", str(profile), "-o", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, preexec_fn=small_disk,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1
    failures = [ln for ln in proc.stderr.splitlines() if "cannot write the results file" in ln]
    assert len(failures) == 2  # once when it began, once in the final line
    # what was measured is still printed
    assert "comparison" in proc.stdout and proc.stdout.count("lb") >= 2
    # the receipt ledgers fit the same file-size limit: deliveries are counted, not lost,
    # and one line says how many messages the limit leaves room for
    assert re.search(r"received=[1-9]", proc.stdout), proc.stdout
    assert "file-size limit (ulimit -f) leaves room for" in proc.stderr, proc.stderr
    doc = strict_json(out)  # the last good copy, intact
    assert doc["schema"] == 3 and doc["steps"] == []
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".results-")]


# -- class 5: strict JSON --------------------------------------------------------------


def test_results_file_is_strict_json_whatever_a_figure_holds(tmp_path: Path) -> None:
    from dataclasses import replace

    from mqlab.record.values import Throughput
    from mqlab.results.store import ResultsFile
    from tests.results_fixtures import step, typed

    res = ResultsFile(tmp_path / "r.json", {"run": {}}, {"x": float("nan")})
    record = typed(step(0, "a"))
    throughput = Throughput(mean=float("inf"), stdev=float("-inf"), seconds=3)
    res.add_step(replace(record, figures=replace(record.figures, throughput=throughput)))
    doc = strict_json(tmp_path / "r.json")
    assert doc["environment"]["x"] is None
    assert doc["steps"][0]["throughput"] == {"mean": None, "stdev": None, "seconds": 3}


# -- classes 6 and 7: text the terminal interprets, files of the wrong shape ------


def test_markup_in_names_is_shown_as_written_in_run_and_show(tmp_path: Path) -> None:
    text = (
        '[run]\nname = "a[/]b [bold red]c"\nduration = "1s"\nwarmup = "0s"\n'
        '[drivers."[/]lb[red]"]\nplugin = "loopback"\n[[scenario]]\npattern = "cast"\n'
        'concurrency = 1\nname = "[link=x]s"\n'
    )
    out = tmp_path / "r.json"
    proc = mqlab("run", str(write_profile(tmp_path / "p.toml", text)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "[/]lb[red]" in proc.stdout and "[link=x]s" in proc.stdout
    shown = mqlab("show", str(out))
    assert shown.returncode == 0, shown.stderr
    assert "a[/]b [bold red]c" in shown.stdout and "[/]lb[red]" in shown.stdout


def test_escape_sequences_in_a_results_file_never_reach_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = quick_run(tmp_path)
    doc = strict_json(out)
    doc["profile"]["run"]["name"] = "\x1b[2J\x1b]0;owned\x07"
    doc["steps"][0]["driver"] = "\x1b[31mred"
    out.write_text(json.dumps(doc))
    for args in (["show", str(out)], ["show", "--markdown", str(out)]):
        assert main(args) == 0
        captured = capsys.readouterr()
        assert "\x1b" not in captured.out + captured.err and "\x07" not in captured.out
        assert "\\x1b[31mred" in captured.out


def test_the_console_prints_any_text_as_text() -> None:
    import io

    from rich.table import Table

    from mqlab.terminal import SafeConsole

    buf = io.StringIO()
    console = SafeConsole(file=buf, width=120)
    table = Table("driver")
    table.add_row("\x1b[31mred[/] [bold]x\x07\r")
    console.print(table)
    console.print("broker said: \x1b]0;title\x07 [/red]")
    text = buf.getvalue()
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    assert "\\x1b[31mred[/] [bold]x\\x07\\r" in text and "[/red]" in text


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("[]", "expected a JSON object"),
        ('{"schema": 4, "steps": []}', "results schema 4 is not one this mqlab reads"),
        ('{"schema": 2}', "no schema and steps"),
        (
            '{"schema": 2, "steps": [1], "profile": {}, "environment": {}, "status": "done"}',
            "steps[0]: expected an object, got 1",
        ),
        (
            '{"schema": 2, "steps": [{"driver": NaN}], "profile": {}, "environment": {}, '
            '"status": "done"}',
            "not strict JSON",
        ),
        ("[" * 100000 + "]" * 100000, "nested too deeply"),
        (
            '{"schema": 2, "steps": [{"throughput": "x"}], "profile": {"run": []}, '
            '"environment": {}, "status": "done"}',
            "steps[0].step: missing",
        ),
        ("\xff\xfe", "cannot read"),
    ],
)
def test_show_refuses_files_of_the_wrong_shape_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, words: str
) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(content.encode("latin-1"))
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and words in err, err


def test_report_output_follows_the_same_file_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = quick_run(tmp_path)
    notes = write_profile(tmp_path / "notes.html", "<p>mine</p>\n")
    for target in (notes, out, Path("/dev/null"), tmp_path):
        assert main(["report", str(out), "-o", str(target)]) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and str(target) in err, err
    assert notes.read_text() == "<p>mine</p>\n" and strict_json(out)["status"] == "done"


@pytest.mark.parametrize("command", [["show"], ["report"], ["compare", "/dev/zero"]])
def test_readers_of_results_files_refuse_a_device_without_reading_it_all(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    assert main([*command, "/dev/zero"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "67,108,864 bytes" in err, err
