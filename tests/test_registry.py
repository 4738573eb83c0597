from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from mqlab import registry
from mqlab.errors import OptionError, PluginError
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
    assert registry.get("loopback").cls is LoopbackTransport


def _loaded(name: str = "loopback") -> registry.LoadedPlugin:
    found = registry.discover([_ep(name, "mqlab.loopback:LoopbackTransport")])
    return registry.load(found[name])


def test_loaded_plugin_builds_a_transport_with_checked_options_and_defaults() -> None:
    transport = _loaded().build(("loopback://",), {}, "w7")
    assert isinstance(transport, LoopbackTransport)
    assert transport.options == {"queue_size": 1024}
    assert transport.config.worker == "w7"


def test_a_bad_option_names_the_plugin_as_registered_and_the_option() -> None:
    with pytest.raises(
        OptionError, match=r"plugin 'mybus', option 'queue_size': expected a number >= 1"
    ):
        _loaded("mybus").build(("loopback://",), {"queue_size": 0})
    with pytest.raises(OptionError, match=r"plugin 'mybus', option 'queue_sise': not supported"):
        _loaded("mybus").check({"queue_sise": 8})
