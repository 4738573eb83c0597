"""Plugin discovery through the ``mqlab.transports`` entry-point group.

One construction path, in two steps (flake8's finder: ``Plugin`` -> ``LoadedPlugin``):

- :func:`discover` lists every :class:`Plugin` without importing it (``mqlab
  plugins`` must not crash because one plugin's library is broken);
- :func:`load` imports one and returns a :class:`LoadedPlugin`, which checks a
  driver's options once (:meth:`LoadedPlugin.check`) and builds the transport
  (:meth:`LoadedPlugin.build`). An import failure is a :class:`PluginError`
  naming the plugin and its package; a bad option an :class:`OptionError`
  naming the plugin and the option.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from mqlab.errors import OptionError, PluginError
from mqlab.transport import OptionConflict, Transport, TransportConfig, parse_options

GROUP = "mqlab.transports"


@dataclass(frozen=True, slots=True)
class Plugin:
    """A registered plugin, not imported yet."""

    name: str
    package: str
    version: str
    entry_point: EntryPoint


@dataclass(frozen=True, slots=True)
class LoadedPlugin:
    """An imported plugin: checks options and builds its transport."""

    name: str
    package: str
    version: str
    cls: type[Transport]

    def check(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """The driver's option values, checked one by one and together, defaults filled."""
        options = parse_options(self.name, self.cls.option_specs, raw)
        try:
            self.cls.check_combinations(options)
        except OptionConflict as exc:
            raise OptionError(self.name, exc.option, exc.problem) from exc
        return options

    def build(self, urls: Sequence[str], raw: Mapping[str, Any], worker: str = "w0") -> Transport:
        """A transport for one worker, its options checked (not started yet)."""
        return self.cls(TransportConfig(tuple(urls), self.check(raw), worker))


def _plugin(ep: EntryPoint) -> Plugin:
    dist = ep.dist
    package = dist.metadata["Name"] if dist is not None else "?"
    version = dist.version if dist is not None else "?"
    return Plugin(ep.name, package, version, ep)


def discover(eps: list[EntryPoint] | None = None) -> dict[str, Plugin]:
    """Every registered plugin by name, sorted, nothing imported."""
    found = list(entry_points(group=GROUP)) if eps is None else eps
    return {ep.name: _plugin(ep) for ep in sorted(found, key=lambda e: e.name)}


def load(plugin: Plugin) -> LoadedPlugin:
    """Import one plugin; any failure is a PluginError naming the package."""
    try:
        obj = plugin.entry_point.load()
    except Exception as exc:
        raise PluginError(
            plugin.name,
            f"plugin {plugin.name!r} (package {plugin.package}) failed to load: "
            f"{type(exc).__name__}: {exc}",
            plugin.package,
        ) from exc
    if not (isinstance(obj, type) and issubclass(obj, Transport)):
        raise PluginError(
            plugin.name,
            f"plugin {plugin.name!r} (package {plugin.package}) does not name a "
            f"mqlab.transport.Transport subclass: {plugin.entry_point.value}",
            plugin.package,
        )
    return LoadedPlugin(plugin.name, plugin.package, plugin.version, obj)


def get(name: str, plugins: Mapping[str, Plugin] | None = None) -> LoadedPlugin:
    """Load plugin ``name``; an unknown name lists the ones installed."""
    plugins = discover() if plugins is None else plugins
    if name not in plugins:
        known = ", ".join(plugins) or "none"
        raise PluginError(name, f"unknown plugin {name!r} (installed: {known})")
    return load(plugins[name])
