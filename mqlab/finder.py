"""The one finder for mqlab's entry-point groups: ``mqlab.transports`` (the plugins),
``mqlab.references`` (their reference loops) and ``mqlab.servers`` (servers they ship).

flake8's finder, in two steps: :func:`discover` lists entry points without importing any
(``mqlab plugins`` must not crash because one plugin's library is broken); :func:`import_class`
imports one and checks what it names, and any failure is a :class:`PluginError` naming the
plugin and its package.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from mqlab.errors import PluginError

GROUP = "mqlab.transports"
#: each plugin's reference loop (mqlab.sdk.reference), under the plugin's name
REFERENCES = "mqlab.references"
#: servers plugins ship for mqlab to start (mqlab.sdk.server), under ``Features.server``'s name
SERVERS = "mqlab.servers"


@dataclass(frozen=True, slots=True)
class Plugin:
    """A registered plugin, not imported yet."""

    name: str
    package: str
    version: str
    entry_point: EntryPoint


def _plugin(ep: EntryPoint) -> Plugin:
    dist = ep.dist
    package = dist.metadata["Name"] if dist is not None else "?"
    version = dist.version if dist is not None else "?"
    return Plugin(ep.name, package, version, ep)


def discover(eps: list[EntryPoint] | None = None, group: str = GROUP) -> dict[str, Plugin]:
    """Every entry point of ``group`` by name, sorted, nothing imported."""
    found = list(entry_points(group=group)) if eps is None else eps
    return {ep.name: _plugin(ep) for ep in sorted(found, key=lambda e: e.name)}


def import_class(plugin: Plugin, base: type, what: str) -> type:
    """Import the class an entry point names; PluginError naming the package if it fails
    or is not a subclass of ``base`` (``what`` names that base in the message)."""
    try:
        obj = plugin.entry_point.load()
    except Exception as exc:
        raise PluginError(
            plugin.name,
            f"plugin {plugin.name!r} (package {plugin.package}) failed to load: "
            f"{type(exc).__name__}: {exc}",
            plugin.package,
        ) from exc
    if not (isinstance(obj, type) and issubclass(obj, base)):
        raise PluginError(
            plugin.name,
            f"plugin {plugin.name!r} (package {plugin.package}) does not name a "
            f"{what} subclass: {plugin.entry_point.value}",
            plugin.package,
        )
    return obj
