"""Plugins through the ``mqlab.transports`` entry-point group, found by :mod:`mqlab.finder`.

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
from typing import Any, cast

from mqlab.errors import OptionError, PluginError
from mqlab.finder import GROUP, REFERENCES, Plugin, discover, import_class
from mqlab.sdk import urls
from mqlab.transport import Option, OptionConflict, Transport, TransportConfig


@dataclass(frozen=True, slots=True)
class LoadedPlugin:
    """An imported plugin: checks options and builds its transport."""

    name: str
    package: str
    version: str
    cls: type[Transport]

    def __post_init__(self) -> None:
        # every URL this plugin is given finds its default port, in any process
        urls.declare(self.cls.url_schemes)

    def check(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """The driver's option values, checked one by one and together, defaults filled."""
        options = parse_options(self.name, self.cls.option_specs, raw)
        try:
            self.cls.check_combinations(options)
        except OptionConflict as exc:
            raise OptionError(self.name, exc.option, exc.problem) from exc
        return options

    def build(
        self,
        urls: Sequence[str],
        raw: Mapping[str, Any],
        worker: str = "w0",
        scratch_dir: str | None = None,
    ) -> Transport:
        """A transport for one worker, its options checked (not started yet)."""
        return self.cls(TransportConfig(tuple(urls), self.check(raw), worker, scratch_dir))


def load(plugin: Plugin) -> LoadedPlugin:
    """Import one plugin; any failure is a PluginError naming the package."""
    cls = cast("type[Transport]", import_class(plugin, Transport, "mqlab.transport.Transport"))
    return LoadedPlugin(plugin.name, plugin.package, plugin.version, cls)


def get(name: str, plugins: Mapping[str, Plugin] | None = None) -> LoadedPlugin:
    """Load plugin ``name``; an unknown name lists the ones installed."""
    plugins = discover() if plugins is None else plugins
    if name not in plugins:
        known = ", ".join(plugins) or "none"
        raise PluginError(name, f"unknown plugin {name!r} (installed: {known})")
    return load(plugins[name])


__all__ = [
    "GROUP",
    "REFERENCES",
    "LoadedPlugin",
    "Plugin",
    "discover",
    "get",
    "import_class",
    "load",
]


def parse_options(
    plugin: str, specs: Mapping[str, Option], raw: Mapping[str, Any]
) -> dict[str, Any]:
    """Check ``raw`` driver options against ``specs``; return them with defaults filled.

    Raises :class:`OptionError` naming the option for anything unknown, ill-typed,
    out of bounds or not among the choices.
    """
    unknown = sorted(set(raw) - set(specs))
    if unknown:
        known = ", ".join(sorted(specs)) or "none"
        raise OptionError(plugin, unknown[0], f"not supported (this plugin's options: {known})")
    out: dict[str, Any] = {}
    for name, spec in specs.items():
        value = raw.get(name, spec.default)
        if name in raw:
            problem = spec.problem(value)
            if problem:
                raise OptionError(plugin, name, problem)
        out[name] = value
    return out
