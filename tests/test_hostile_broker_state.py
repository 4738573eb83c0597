"""A broker state record with nonsense in it (issue 33, class 6).

``mqlab broker status``/``stop`` read each node's ``node.json`` and signal the pid it
names. A pid that is negative, zero (``kill(0)`` signals the whole process group), init,
not a number, or any other field of the wrong type or range is refused in one line naming
the record and the field, and nothing is signalled.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mqlab.console.cli import main

GOOD: dict[str, Any] = {
    "name": "mqlab-5999@localhost", "url": "amqp://guest:guest@127.0.0.1:5999/",
    "management_url": "http://127.0.0.1:15999/", "port": 5999, "management_port": 15999,
    "dist_port": 25999, "pid": 4_000_000, "version": "3.12.1", "prometheus_port": 15998,
    "create_time": 1.0, "epmd_port": 4369, "epmd_started": False, "index": 1,
    "seed": "mqlab-5999@localhost",
}  # fmt: skip


def _state(tmp_path: Path, **changes: Any) -> Path:
    record = {**GOOD, **changes}
    for key, value in changes.items():
        if value is KeyError:
            del record[key]
    node = tmp_path / "state" / "mqlab-5999"
    node.mkdir(parents=True)
    text = json.dumps(record).replace('"<huge>"', "1" + "0" * 400)
    (node / "node.json").write_text(text)
    return tmp_path / "state"


@pytest.mark.parametrize(
    "pid", [-1, 0, 1, "4242", "x", 1.5, True, None, [4242], {"pid": 1}, "<huge>", KeyError]
)
@pytest.mark.parametrize("action", ["status", "stop"])
def test_a_nonsense_pid_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: str, pid: Any
) -> None:
    state = _state(tmp_path, pid=pid)
    code = main(["broker", action, "--state-dir", str(state)])
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert code == 1 and len(lines) == 1, err
    assert lines[0].startswith("mqlab: cannot read broker record ") and "pid" in lines[0], err
    assert "node.json" in lines[0] and "Traceback" not in err


@pytest.mark.parametrize(
    ("field", "value"),
    [("port", -5), ("port", 70000), ("dist_port", "x"), ("create_time", "NaN-ish"),
     ("create_time", [1]), ("index", 0), ("name", 42), ("url", None)],
)  # fmt: skip
def test_other_fields_of_the_record_are_checked_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: Any
) -> None:
    state = _state(tmp_path, **{field: value})
    assert main(["broker", "status", "--state-dir", str(state)]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and f"{field}: expected" in err, err
