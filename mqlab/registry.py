"""Plugin discovery through the ``mqlab.transports`` entry-point group.

Entry points are listed without importing them (``mqlab plugins`` must not
crash because one plugin's library is broken); a plugin is imported only when
it is asked for, and an import failure becomes a :class:`PluginError` naming
the plugin and its package.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from mqlab.errors import PluginError
from mqlab.transport import Transport

GROUP = "mqlab.transports"


@dataclass(frozen=True, slots=True)
class PluginInfo:
    name: str
    package: str
    version: str
    entry_point: EntryPoint


def _info(ep: EntryPoint) -> PluginInfo:
    dist = ep.dist
    package = dist.metadata["Name"] if dist is not None else "?"
    version = dist.version if dist is not None else "?"
    return PluginInfo(ep.name, package, version, ep)


def discover(eps: list[EntryPoint] | None = None) -> dict[str, PluginInfo]:
    """Every registered plugin by name, sorted, nothing imported."""
    found = list(entry_points(group=GROUP)) if eps is None else eps
    return {ep.name: _info(ep) for ep in sorted(found, key=lambda e: e.name)}


def load(info: PluginInfo) -> type[Transport]:
    """Import one plugin's class; any failure is a PluginError naming the package."""
    try:
        obj = info.entry_point.load()
    except Exception as exc:
        raise PluginError(
            info.name,
            f"plugin {info.name!r} (package {info.package}) failed to load: "
            f"{type(exc).__name__}: {exc}",
            info.package,
        ) from exc
    if not (isinstance(obj, type) and issubclass(obj, Transport)):
        raise PluginError(
            info.name,
            f"plugin {info.name!r} (package {info.package}) does not name a "
            f"mqlab.transport.Transport subclass: {info.entry_point.value}",
            info.package,
        )
    return obj


def get(name: str, plugins: dict[str, PluginInfo] | None = None) -> type[Transport]:
    """Load plugin ``name``; an unknown name lists the ones installed."""
    plugins = discover() if plugins is None else plugins
    if name not in plugins:
        known = ", ".join(plugins) or "none"
        raise PluginError(name, f"unknown plugin {name!r} (installed: {known})")
    return load(plugins[name])
