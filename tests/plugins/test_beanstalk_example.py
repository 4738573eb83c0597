"""examples/beanstalk: a plugin for a broker mqlab does not know, written from the plugin
guide. It brings its own URL scheme (``beanstalk://``) and its own server (entry-point group
``mqlab.servers``): the kit runs against a beanstalkd that mqlab starts through it, and a
managed run samples that beanstalkd's CPU beside the workers'."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import greenstalk
import psutil
import pytest
from mqlab_beanstalk import _client

from mqlab.servers import managed
from mqlab.servers.handle import ServerHandle
from mqlab.testing import ConformanceSuite, Subject
from tests.helpers import mqlab, results, write_profile

from .conftest import _managed
from .test_conformance_beyond import restarts


@pytest.fixture(scope="session")
def beanstalkd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    yield from _managed("beanstalkd", tmp_path_factory)


def tubes_left(url: str) -> Callable[[str], list[str]]:
    """The tubes naming a check's tag: beanstalkd drops a tube nobody watches or fills."""

    def leftovers(tag: str) -> list[str]:
        client: greenstalk.Client[bytes] = _client(url, 5.0)
        try:
            return [t for t in client.tubes() if tag in t]
        finally:
            client.close()

    return leftovers


def on_beanstalkd(handle: ServerHandle, transport: Any = "beanstalk", **kw: Any) -> Subject:
    return Subject(
        transport,
        urls=handle.urls,
        mandatory_options={"mandatory": True},
        at_most_once_options={"retry": 0, "ack": "before"},
        bad_options={"senders": 0, "ack": "never"},
        leftovers=tubes_left(handle.urls[0]),
        ceiling=False,  # an example: no reference loop of its own
        restart=restarts("beanstalkd", handle),
        **kw,
    )


class TestBeanstalkExample(ConformanceSuite):
    @pytest.fixture
    def subject(self, beanstalkd: ServerHandle) -> Subject:
        return on_beanstalkd(beanstalkd)


def test_the_declared_server_is_started_and_its_url_has_the_plugins_scheme(
    tmp_path: Path,
) -> None:
    with managed.managed(["beanstalkd"], tmp_path) as handles:
        handle = handles["beanstalkd"]
        assert handle.urls[0].startswith("beanstalk://127.0.0.1:")
        (pid,) = handle.pids
        assert psutil.Process(pid).name() == "beanstalkd"
        assert handle.facts["version"] != "?"
    assert not psutil.pid_exists(pid), "stopped by its PID at the end"


def test_a_managed_run_measures_the_declared_servers_cpu(tmp_path: Path) -> None:
    profile = write_profile(
        tmp_path / "b.toml",
        "[run]\nduration = 2\nwarmup = 0.5\n[broker]\nmanaged = true\n"
        '[drivers.bean]\nplugin = "beanstalk"\n'
        '[[scenario]]\npattern = "cast"\nconcurrency = 8\n',
    )
    out = tmp_path / "r.json"
    proc = mqlab("run", str(profile), "-o", str(out), "--quiet", timeout=240)
    assert proc.returncode == 0, proc.stderr
    (step,) = results(out)["steps"]
    assert step["cpu"]["broker_process"]["name"] == "beanstalkd", step["cpu"]
    assert step["cpu"]["broker_percent"] > 0, step["cpu"]
    assert step["received"] > 0 and step["lost"] == 0, step


def test_a_url_of_another_scheme_is_refused_naming_the_plugins(tmp_path: Path) -> None:
    profile = write_profile(
        tmp_path / "b.toml",
        '[drivers.bean]\nplugin = "beanstalk"\nurl = "amqp://127.0.0.1:11300"\n'
        '[[scenario]]\npattern = "cast"\nconcurrency = 1\n',
    )
    proc = mqlab("validate", str(profile))
    assert proc.returncode == 2
    assert "drivers.bean.url: scheme 'amqp' is not one plugin 'beanstalk'" in proc.stderr
    assert "beanstalk://" in proc.stderr
