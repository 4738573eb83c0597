"""The kit's server-restart checks on the RabbitMQ plugins, on a node of this module's own.

The session broker the other conformance tests share cannot restart under them, so these
two checks (:mod:`mqlab.testing.restart`) skipped for every RabbitMQ plugin. Here one private
node serves the whole module and restarts as the fault events restart a node
(:class:`~mqlab.rabbitmq.faults.NodeControl`): stopped with ``rabbitmqctl stop``, or killed
with SIGKILL as a crash would, then booted again from its own data on its own ports. A file
of its own: pytest-xdist (``--dist loadfile``) gives it a worker, and its restarts hold up
no other file's tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mqlab.rabbitmq.faults import NodeControl
from mqlab.testing import ConformanceSuite, Subject
from tests.conftest import BrokerHandle, private_node

from .kit import node_restarts
from .test_conformance import FIELDS, on_rabbitmq

pytestmark = pytest.mark.broker

#: what the restart check found and left to the plugin: a cast resent once the node is back
#: can reach the exchange before the server's consumer has declared its queue again (not
#: durable, so the restart deleted it): unroutable, and dropped unheard (no mandatory flag).
#: Whether one is lost depends on which reconnects first, so the mark is not strict.
UNROUTED = (
    "found by this check, left to the {}: a cast resent after the restart can reach the "
    "exchange before the server's consumer has declared its non-durable queue again, and is "
    "dropped unheard (published without mandatory), though retry promises no loss"
)
FOUND = {("oslo", "default"): "oslo plugin (oslo.messaging)"}

Node = tuple[BrokerHandle, NodeControl]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    state_dir = tmp_path_factory.mktemp("restarted")
    with private_node(state_dir) as handle:
        yield handle, NodeControl(state_dir)


def _case(plugin: str, *more: str) -> Any:  # a pytest.param
    marks = []
    found = FOUND.get((plugin, *more))
    if found is not None:
        # not run in CI: it fails in some runs only (which side reconnects first), so a run
        # proves nothing either way, and each costs a node restart under load (the suite's
        # time); run it by hand with `--runxfail`
        marks.append(pytest.mark.xfail(reason=UNROUTED.format(found), strict=False, run=False))
    return pytest.param(plugin, *more, marks=marks, id="-".join((plugin, *more)))


def _subject(plugin: str, node: Node) -> Subject:
    handle, control = node
    return on_rabbitmq(plugin, handle, restart=node_restarts(control))


# as the ConformanceSuite parametrizes them: at most once where the plugin has its options
@pytest.mark.parametrize(
    ("plugin", "delivery_mode"),
    [
        _case(plugin, mode)
        for plugin, fields in FIELDS.items()
        for mode in ("default", "at-most-once")
        if mode == "default" or "at_most_once_options" in fields
    ],
)
def test_the_server_restarts_under_load(node: Node, plugin: str, delivery_mode: str) -> None:
    suite = ConformanceSuite()
    suite.test_the_server_restarts_under_load(_subject(plugin, node), delivery_mode)


@pytest.mark.parametrize(
    "plugin", [_case(plugin) for plugin, fields in FIELDS.items() if "mandatory_options" in fields]
)
def test_mandatory_after_the_server_is_killed(node: Node, plugin: str) -> None:
    ConformanceSuite().test_mandatory_after_the_server_is_killed(_subject(plugin, node))
