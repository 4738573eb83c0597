"""The plugin contract itself: patterns from methods, option bounds, combination checks."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from mqlab import registry
from mqlab.codec import Codec
from mqlab.config.plan import WorkerSpec
from mqlab.errors import ConnectionLost, OptionError
from mqlab.loopback import LoopbackTransport
from mqlab.registry import LoadedPlugin, parse_options
from mqlab.transport import (
    Handler,
    Option,
    OptionConflict,
    Target,
    Transport,
    TransportConfig,
    cast_starter,
)
from mqlab.worker import process
from mqlab.worker.recorder import Recorder


class _NotifyOnly(Transport):
    option_specs: ClassVar[Mapping[str, Option]] = {
        "window": Option((int,), 10, "messages in flight", minimum=1, maximum=100),
        "mode": Option((str,), "fast", "how", choices=("fast", "safe")),
        "acks": Option((bool,), True, "ack after the handler"),
    }

    @classmethod
    def check_combinations(cls, options: Mapping[str, Any]) -> None:
        if options["mode"] == "safe" and not options["acks"]:
            raise OptionConflict("acks", "safe mode needs acks = true")

    async def aclose(self) -> None:
        pass

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        pass

    async def notify(self, target: Target, body: bytes) -> None:
        pass


class _CastWithoutServer(_NotifyOnly):
    async def cast(self, target: Target, body: bytes) -> None:
        pass


def test_patterns_follow_the_methods_a_plugin_overrides() -> None:
    assert _NotifyOnly.patterns() == {"notify"}
    # a client method without its server side is no pattern
    assert _CastWithoutServer.patterns() == {"notify"}
    from mqlab.loopback import LoopbackTransport

    assert LoopbackTransport.patterns() == {"call", "cast", "notify"}


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"window": 0}, "'window': expected 1..100, got 0"),
        ({"window": 101}, "'window': expected 1..100, got 101"),
        ({"window": True}, "'window': expected int, got True"),
        ({"mode": "slow"}, "'mode': expected one of 'fast', 'safe', got 'slow'"),
    ],
)
def test_option_bounds_and_choices_are_enforced(raw: dict[str, Any], problem: str) -> None:
    with pytest.raises(OptionError) as info:
        parse_options("nb", _NotifyOnly.option_specs, raw)
    assert problem in str(info.value)


def test_combination_check_runs_once_through_the_loaded_plugin() -> None:
    plugin = LoadedPlugin("nb", "nb-pkg", "1.0", _NotifyOnly)
    assert plugin.check({"mode": "safe"}) == {"window": 10, "mode": "safe", "acks": True}
    with pytest.raises(OptionError, match=r"plugin 'nb', option 'acks': safe mode needs acks"):
        plugin.check({"mode": "safe", "acks": False})


_sent_by: list[str] = []  # which method sent each cast


class _Plain(Transport):
    """A driver with cast alone."""

    async def aclose(self) -> None:
        pass

    async def cast(self, target: Target, body: bytes) -> None:
        _sent_by.append("cast")


class _Quick(_Plain):
    """A driver that sends most casts at once through begin_cast."""

    def begin_cast(self, target: Target, body: bytes) -> None:
        _sent_by.append("begin_cast")


class _Counting(_Quick):
    """A driver built on _Quick that counts its casts by overriding cast alone."""

    async def cast(self, target: Target, body: bytes) -> None:
        _sent_by.append("counted cast")


@pytest.mark.parametrize(
    ("cls", "called"),
    [(_Quick, "begin_cast"), (_Counting, "counted cast"), (_Plain, "cast")],
)
async def test_the_core_casts_through_begin_cast_unless_a_subclass_overrides_cast(
    cls: type[Transport], called: str
) -> None:
    # a driver built on another must not have its own cast skipped because its
    # parent sends through begin_cast; a driver without begin_cast gets its cast
    _sent_by.clear()
    waiting = cast_starter(cls(TransportConfig(("x://",))))(Target("x", "t"), b"m")
    if waiting is not None:
        await waiting
    assert _sent_by == [called]


class _Reports(LoopbackTransport):
    """A driver that says, from the background, that its connection dropped."""

    async def start(self) -> None:
        await super().start()
        self.report(ConnectionLost("connection to amqp://u:***@h:1/ lost: reset; reconnecting"))


async def test_an_error_a_driver_reports_counts_in_the_step_and_fails_no_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what a worker does with a driver's report: the step's errors name it, with its
    # message, and no message is counted as failed for it
    monkeypatch.setattr(registry, "get", lambda name: LoadedPlugin(name, "t", "0", _Reports))
    spec = WorkerSpec(
        "w0", "reports", ("loopback://",), {}, "cast", "x", False, False, False, 5.0,
        "msgpack", False, ((64, 64, 1),),
    )  # fmt: skip
    rec = Recorder(str(tmp_path), "w0")
    (transport,) = await process._start(spec, rec, Codec("msgpack", False))
    await transport.aclose()
    rec.ledger.close()
    assert rec.errors == {"ConnectionLost": 1}
    assert rec.error_messages["ConnectionLost"].endswith("lost: reset; reconnecting")
    assert rec.failed == 0
    # reported before the step's clock started: binned in its first second
    assert rec.series["errors"] == [1]
