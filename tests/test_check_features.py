"""What a plugin does not declare is refused before anything runs (issue 36, part 4).

A profile field or a driver option that asks for a feature (durable, queue types,
fanout, at-most-once, mandatory) is one ``mqlab: ...`` line naming the field, the
plugin and the feature when the plugin does not declare it, so no results file can
say a run had a property its driver does not have.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

import pytest

from mqlab import registry
from mqlab.config.check import check_profile
from mqlab.config.profile import parse_profile
from mqlab.console.cli import main
from mqlab.errors import ProfileError
from mqlab.faults.verdict import promise
from mqlab.measure.account import NO_LOSS, ONCE, Promise
from mqlab.registry import LoadedPlugin
from mqlab.transport import Features, Handler, Option, Target, Transport

from .helpers import write_profile


def _validate(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["validate", str(write_profile(tmp_path / "p.toml", text))])
    return code, capsys.readouterr().err


def test_a_durable_request_on_zmq_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        '[drivers.zmq]\nplugin = "zmq"\n'
        '[[scenario]]\npattern = "cast"\nconcurrency = [1]\ndurable = true\n'
    )
    code, err = _validate(tmp_path, text, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mqlab: ")
    assert "scenario[0].durable" in err and "'zmq'" in err and "'durable'" in err
    assert "Traceback" not in err


def test_a_durable_background_on_a_plugin_without_durability_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        '[drivers.lb]\nplugin = "loopback"\n[[scenario]]\npattern = "call"\nconcurrency = [1]\n'
        'background = { pattern = "notify", rate = 10, durable = true }\n'
    )
    code, err = _validate(tmp_path, text, capsys)
    assert code == 2 and "scenario[0].background.durable" in err and "'loopback'" in err


def test_durable_on_a_plugin_that_declares_it_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        '[drivers.kombu]\nplugin = "kombu"\n'
        '[[scenario]]\npattern = "notify"\nconcurrency = [1]\ndurable = true\n'
    )
    code, err = _validate(tmp_path, text, capsys)
    assert code == 0, err


class _NoFeatures(Transport):
    """A plugin with an at-most-once option it does not declare (a plugin author's slip)."""

    features: ClassVar[Features] = Features(mandatory=True)
    option_specs: ClassVar[Mapping[str, Option]] = {
        "retry": Option((int,), 3, "republishes", feature="at_most_once", needs=(0,)),
        "mandatory": Option((bool,), False, "fail fast", feature="mandatory", needs=(True,)),
    }

    async def aclose(self) -> None:
        return None

    async def serve_rpc(self, target: Target, handler: Handler) -> None:
        return None

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        return body


def _check_with(options: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = {
        "drivers": {"x": {"plugin": "nofeatures", **tomllib.loads(options)}},
        "scenario": [{"pattern": "call", "concurrency": [1]}],
    }
    fake = LoadedPlugin("nofeatures", "tests", "0", _NoFeatures)
    monkeypatch.setattr(registry, "get", lambda name, found=None: fake)
    check_profile(parse_profile(data, "p.toml"))


def test_an_option_asking_for_an_undeclared_feature_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ProfileError) as err:
        _check_with("retry = 0", monkeypatch)
    msg = str(err.value)
    assert "drivers.x.retry" in msg and "'nofeatures'" in msg and "'at_most_once'" in msg
    _check_with("retry = 2", monkeypatch)  # a value that asks for nothing passes
    _check_with("mandatory = true", monkeypatch)  # a declared feature passes


def test_retry_0_promises_at_most_once_only_where_the_plugin_declares_it() -> None:
    assert promise({"retry": 0}, at_most_once=True) == Promise(
        ONCE, "retry = 0 promises at most once"
    )
    # the kombu-style driver acks after the handler: retry = 0 is no at-most-once promise
    # (its step's verdict: tests/test_explained.py)
    assert promise({"retry": 0}, at_most_once=False) is None
    assert promise({"retry": -1}) == Promise(NO_LOSS, "retry = forever promises no loss")
