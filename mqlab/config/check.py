"""A profile checked against the installed plugins: plugins, options, patterns, features.

Run by ``mqlab validate`` and ``mqlab run`` before anything starts; every problem
is a :class:`ProfileError` naming the file, the field and the fix.
"""

from __future__ import annotations

from mqlab import registry
from mqlab.config.capable import check_events
from mqlab.config.hosts import loopback
from mqlab.config.profile import DriverSpec, Profile, Scenario
from mqlab.config.roles import needed_seconds
from mqlab.errors import OptionError, PluginError, ProfileError
from mqlab.registry import LoadedPlugin
from mqlab.sdk.urls import host_port, mask
from mqlab.transport import FEATURES


def check_profile(profile: Profile) -> dict[str, LoadedPlugin]:
    """Load every driver's plugin and check its options and patterns, by driver name."""
    found = registry.discover()
    plugins: dict[str, LoadedPlugin] = {}
    for d in profile.drivers:
        where = f"drivers.{d.name}"
        try:
            plugin = registry.get(d.plugin, found)
            options = plugin.check(d.options_dict)
        except PluginError as exc:
            raise ProfileError(profile.path, f"{where}.plugin", str(exc)) from None
        except OptionError as exc:
            raise ProfileError(profile.path, f"{where}.{exc.option}", exc.problem) from None
        plugins[d.name] = plugin
        _check_option_features(profile, d, plugin)
        _check_schemes(profile, d, plugin, plugin.cls.server_for(options))
    for i, sc in enumerate(profile.scenarios):
        named = _named(sc)
        if named:
            _check_mix(profile, i, sc, named, plugins)
        for d in profile.drivers:
            if (sc.drivers and d.name not in sc.drivers) or (named and d.name not in named):
                continue
            cls = plugins[d.name].cls
            if sc.pattern not in cls.patterns():
                raise ProfileError(
                    profile.path,
                    f"scenario[{i}].pattern",
                    f"driver {d.name!r} (plugin {d.plugin!r}) does not support "
                    f"{sc.pattern!r}; limit the scenario with drivers = [...]",
                )
            _check_features(profile, i, sc, d, plugins[d.name])
    check_events(profile, plugins)
    _check_across_hosts(profile, plugins)
    return plugins


def _check_schemes(
    profile: Profile, d: DriverSpec, plugin: LoadedPlugin, server: str | None
) -> None:
    """Each URL the driver will be given has a scheme its plugin declares (when it declares
    any): its own ``url``, else the profile's [broker] url, unless the managed server's
    replace them."""
    declared = plugin.cls.url_schemes
    if not declared or (server is not None and profile.broker.managed):
        return
    field = f"drivers.{d.name}.url" if d.urls else "broker.url"
    for url in profile.urls_of(d):
        scheme = url.partition("://")[0]
        if scheme.lower() not in declared:
            raise ProfileError(
                profile.path,
                field,
                f"scheme {scheme[:20]!r} is not one plugin {d.plugin!r} (driver {d.name!r}) "
                f"takes: {', '.join(f'{s}://' for s in declared)}; "
                + ("fix the URL" if d.urls else "give the driver its own url"),
            )


def _check_across_hosts(profile: Profile, plugins: dict[str, LoadedPlugin]) -> None:
    """With ``[hosts]`` on other machines, what only one machine reaches is refused: a server
    URL on loopback (each host would reach its own), and what a plugin says cannot span
    machines (``Transport.across_hosts``). Every message would be lost there otherwise."""
    if profile.hosts is None:
        return
    if profile.broker.managed:  # started on the broker hosts: RabbitMQ's nodes only
        for d in profile.drivers:
            kind = plugins[d.name].cls.server_for(plugins[d.name].check(d.options_dict))
            if kind is not None and kind != "rabbitmq":
                raise ProfileError(
                    profile.path, f"drivers.{d.name}",
                    f"its {kind} server would start on a broker host, where mqlab starts "
                    "RabbitMQ nodes only; give that driver its server's url",
                )  # fmt: skip
    if not profile.hosts.elsewhere:
        return
    for d in profile.drivers:
        cls = plugins[d.name].cls
        options = plugins[d.name].check(d.options_dict)
        if cls.server_for(options) is not None and not profile.broker.managed:
            for url in profile.urls_of(d):
                if loopback(host_port(url, 1)[0]):  # the host alone: no port needed
                    raise ProfileError(
                        profile.path, f"drivers.{d.name}.url" if d.urls else "broker.url",
                        f"{mask(url)} is on loopback, which each of the [hosts] machines reads "
                        "as its own: give the broker's address that every host reaches",
                    )  # fmt: skip
        why = cls.across_hosts(options)
        if why:
            raise ProfileError(
                profile.path, f"drivers.{d.name}",
                f"[hosts] puts its servers and clients on other machines, where {why}",
            )  # fmt: skip


def _refusal(field: str, value: object, d: DriverSpec, feature: str, fix: str) -> str:
    """One line: the field's value asks for a feature this driver's plugin does not declare."""
    shown = str(value).lower() if isinstance(value, bool) else repr(value)
    return (
        f"{field} = {shown} asks for {FEATURES[feature]}, which plugin {d.plugin!r} "
        f"(driver {d.name!r}) does not declare (feature {feature!r}); {fix}"
    )


def _check_option_features(profile: Profile, d: DriverSpec, plugin: LoadedPlugin) -> None:
    """An option value that asks for a feature (``retry = 0``: at-most-once) is refused
    when the plugin does not declare it."""
    features = plugin.cls.features
    for name, value in d.options:
        spec = plugin.cls.option_specs.get(name)
        feature = spec.asks(value) if spec is not None else ""
        if feature and not features.declares(feature):
            raise ProfileError(
                profile.path,
                f"drivers.{d.name}.{name}",
                _refusal(name, value, d, feature, f"remove {name} or use another plugin"),
            )


def _check_features(
    profile: Profile, i: int, sc: Scenario, d: DriverSpec, plugin: LoadedPlugin
) -> None:
    """Every scenario field that asks for a feature, refused when ``d``'s plugin lacks it:
    the step would run without it and its results would still say it had it."""
    features = plugin.cls.features
    limit = "limit the scenario with drivers = [...]"
    kind = dict(d.queue_types).get(sc.type_key) or getattr(sc, sc.type_key)
    asked: list[tuple[str, object, str, str]] = [
        (sc.type_key, kind, "queue_types", f"{limit} or leave it classic"),
        ("durable", sc.durable, "durable", f"{limit} or set durable = false"),
        ("fanout", sc.fanout, "fanout", f"{limit} or set fanout = false"),
    ]
    if sc.background is not None and sc.background.durable:
        asked.append(("background.durable", True, "durable", f"{limit} or set it false"))
    for field, value, feature, fix in asked:
        if value in (False, "classic") or features.declares(feature):
            continue
        raise ProfileError(
            profile.path, f"scenario[{i}].{field}", _refusal(field, value, d, feature, fix)
        )
    if sc.prefill and (
        features.in_process or plugin.cls.server_for(plugin.check(d.options_dict)) != "rabbitmq"
    ):
        raise ProfileError(
            profile.path, f"scenario[{i}].prefill",
            f"driver {d.name!r} (plugin {d.plugin!r}) does not talk to RabbitMQ: a pre-filled "
            "step's queues are declared through RabbitMQ's management API; "
            f"{limit} or remove prefill",
        )  # fmt: skip


def _named(sc: Scenario) -> set[str]:
    """The drivers a mixed or rolling scenario names (empty for a plain one)."""
    if sc.rolling is not None:
        return {sc.rolling.old, sc.rolling.new}
    return {n for r in sc.roles for n in (r.servers, r.clients)}


def _check_mix(
    profile: Profile, i: int, sc: Scenario, named: set[str], plugins: dict[str, LoadedPlugin]
) -> None:
    """Drivers that share a step must speak one wire, each in its own worker processes."""
    key = f"scenario[{i}].{'rolling' if sc.rolling is not None else 'roles'}"
    wires = {n: plugins[n].cls.wire for n in sorted(named)}
    said = ", ".join(f"{n} speaks {w}" for n, w in wires.items())
    for n in named:
        if plugins[n].cls.features.in_process:
            raise ProfileError(
                profile.path,
                key,
                f"driver {n!r} runs in-process and cannot be combined with another driver; "
                "mixed steps and rolling updates need worker processes",
            )
    if "unknown" in wires.values():
        raise ProfileError(
            profile.path, key, f"a driver of unknown wire family cannot be combined ({said})"
        )
    if len(set(wires.values())) > 1:
        if sc.rolling is None:
            raise ProfileError(
                profile.path,
                key,
                f"drivers of different wire families cannot share a topic ({said}); "
                "a rolling update (rolling = {...}) can move between them",
            )
        if sc.rolling.order != "servers-first":
            # a moved client speaks only the new wire: a server must already listen on it
            raise ProfileError(
                profile.path,
                f"{key}.order",
                f"order = {sc.rolling.order!r}: across wire families ({said}) servers move "
                "first, each listening on both until the last client has moved; "
                'use order = "servers-first"',
            )
    if sc.rolling is not None:
        workers = sc.servers * sc.targets + profile.run.processes
        need = needed_seconds(sc.rolling, workers)
        if profile.run.duration + 1e-9 < need:
            raise ProfileError(
                profile.path,
                key,
                f"{workers} workers replaced every {sc.rolling.interval:g}s need a window of "
                f"{need:g}s (one phase before, one per worker, one after); "
                f"set [run] duration >= {need:g}s or a shorter interval",
            )
