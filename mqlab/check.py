"""A profile checked against the installed plugins: plugins, options, patterns, features.

Run by ``mqlab validate`` and ``mqlab run`` before anything starts; every problem
is a :class:`ProfileError` naming the file, the field and the fix.
"""

from __future__ import annotations

from mqlab import registry
from mqlab.errors import OptionError, PluginError, ProfileError
from mqlab.profile import Profile
from mqlab.registry import LoadedPlugin


def check_profile(profile: Profile) -> dict[str, LoadedPlugin]:
    """Load every driver's plugin and check its options and patterns, by driver name."""
    found = registry.discover()
    plugins: dict[str, LoadedPlugin] = {}
    for d in profile.drivers:
        where = f"drivers.{d.name}"
        try:
            plugin = registry.get(d.plugin, found)
            plugin.check(d.options_dict)
        except PluginError as exc:
            raise ProfileError(profile.path, f"{where}.plugin", str(exc)) from None
        except OptionError as exc:
            raise ProfileError(profile.path, f"{where}.{exc.option}", exc.problem) from None
        plugins[d.name] = plugin
    for i, sc in enumerate(profile.scenarios):
        for d in profile.drivers:
            if sc.drivers and d.name not in sc.drivers:
                continue
            cls = plugins[d.name].cls
            if sc.pattern not in cls.patterns():
                raise ProfileError(
                    profile.path,
                    f"scenario[{i}].pattern",
                    f"driver {d.name!r} (plugin {d.plugin!r}) does not support "
                    f"{sc.pattern!r}; limit the scenario with drivers = [...]",
                )
            kind = dict(d.queue_types).get(sc.type_key) or getattr(sc, sc.type_key)
            if kind != "classic" and not cls.features.queue_types:
                raise ProfileError(
                    profile.path,
                    f"scenario[{i}].{sc.type_key}",
                    f"driver {d.name!r} (plugin {d.plugin!r}) has no broker queues to make "
                    f"{kind}; limit the scenario with drivers = [...] or leave it classic",
                )
            if sc.fanout and not cls.features.fanout:
                raise ProfileError(
                    profile.path, f"scenario[{i}].fanout", f"plugin {d.plugin!r} has no fanout"
                )
    return plugins
