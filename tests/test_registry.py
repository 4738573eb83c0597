from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from mqlab import registry
from mqlab.errors import PluginError
from mqlab.loopback import LoopbackTransport


def _ep(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=registry.GROUP)


def test_discovery_lists_without_importing_and_sorts() -> None:
    eps = [_ep("zz", "no_such_module_xyz:Thing"), _ep("aa", "mqlab.loopback:LoopbackTransport")]
    found = registry.discover(eps)
    assert list(found) == ["aa", "zz"]  # the broken one is listed, not imported


def test_broken_plugin_is_a_clear_error_naming_it() -> None:
    found = registry.discover([_ep("broken", "no_such_module_xyz:Thing")])
    with pytest.raises(PluginError) as info:
        registry.load(found["broken"])
    assert "broken" in str(info.value) and "failed to load" in str(info.value)
    assert "ModuleNotFoundError" in str(info.value)


def test_entry_point_that_is_not_a_transport_is_refused() -> None:
    found = registry.discover([_ep("odd", "mqlab.codec:Codec")])
    with pytest.raises(PluginError, match=r"does not name a mqlab\.transport\.Transport"):
        registry.load(found["odd"])


def test_unknown_plugin_lists_the_installed_ones() -> None:
    with pytest.raises(PluginError, match=r"unknown plugin 'nope'.*loopback"):
        registry.get("nope")
    assert registry.get("loopback") is LoopbackTransport
