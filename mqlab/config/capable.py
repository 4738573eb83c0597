"""What a profile's events ask of this host and broker, refused before anything starts.

Node actions need a broker mqlab manages (a RabbitMQ cluster, a replicated Kafka, an
Artemis, alone or a primary and backup: mqlab starts, stops and kills their nodes by PID);
``loss`` needs root, ``ip`` and ``nft`` (:mod:`mqlab.netns`: the workers run in a network
namespace whose link drops packets, which the fault proxy cannot imitate, seeing a byte
stream, not packets); worker actions need
server workers of their own. Each refusal is one line naming the field and what
is missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mqlab import netns
from mqlab.config.events import FaultEvent, node_index
from mqlab.errors import ProfileError

if TYPE_CHECKING:
    from mqlab.config.profile import DriverSpec, Profile
    from mqlab.registry import LoadedPlugin


def _server(plugin: LoadedPlugin, options: Mapping[str, Any]) -> str | None:
    """The server a driver talks to (an option may pick it: amqp1's ``broker``)."""
    return plugin.cls.server_for(plugin.check(options))


def check_events(profile: Profile, plugins: Mapping[str, LoadedPlugin]) -> None:
    """Refuse, in one line, an event this host or broker cannot perform."""
    path = profile.path
    for i, sc in enumerate(profile.scenarios):
        drivers = [d for d in profile.drivers if not sc.drivers or d.name in sc.drivers]
        for j, ev in enumerate(sc.events):
            where = f"scenario[{i}].event[{j}]"
            if ev.at >= profile.run.duration:
                raise ProfileError(
                    path, f"{where}.at", f"{ev.at:g} s is not inside the "
                    f"{profile.run.duration:g} s window; lower at or raise run.duration",
                )  # fmt: skip
            if ev.kind == "broker":
                _check_node_event(profile, where, ev, drivers, plugins)
            elif ev.kind == "link":
                # across hosts the load hosts drop the packets: each says what it lacks
                lacking = netns.missing() if ev.action == "loss" and not profile.hosts else ""
                if lacking:
                    raise ProfileError(
                        path, f"{where}.action", f"loss runs the workers in a network "
                        f"namespace and drops packets with nftables, and needs {lacking}",
                    )  # fmt: skip
                if any(plugins[d.name].cls.features.server is None for d in drivers):
                    raise ProfileError(
                        path, f"{where}.action", f"{ev.action} sits between workers and a "
                        "server: limit the scenario to drivers with one (drivers = [...])",
                    )  # fmt: skip
            else:
                if sc.consumers:
                    raise ProfileError(
                        path, f"{where}.action", f"{ev.action} names a server worker, and "
                        "consumers = N shares servers among processes; remove consumers",
                    )  # fmt: skip
                if sc.servers < ev.server:
                    raise ProfileError(
                        path, f"{where}.server", f"server {ev.server}, but the scenario has "
                        f"{sc.servers} server worker(s)",
                    )  # fmt: skip
                if any(plugins[d.name].cls.features.in_process for d in drivers):
                    raise ProfileError(
                        path, f"{where}.action", f"{ev.action} needs server workers of their "
                        "own; an in-process driver has none (drivers = [...])",
                    )  # fmt: skip
            if sc.rolling is not None:
                raise ProfileError(
                    path, f"{where}", "a rolling update and fault events in one scenario "
                    "would blur each other's figures; give them separate scenarios",
                )  # fmt: skip


#: servers whose managed nodes a broker event can act on, and the actions only RabbitMQ has
NODE_SERVERS = ("rabbitmq", "kafka", "artemis")
_RABBITMQ_ONLY = ("close_connections", "memory_alarm")


def _check_node_event(
    profile: Profile,
    where: str,
    ev: FaultEvent,
    drivers: list[DriverSpec],
    plugins: Mapping[str, LoadedPlugin],
) -> None:
    """A node event acts on each step's own managed broker: refused for a driver whose broker
    mqlab does not manage, or has not that node, or cannot do that action."""
    path, nodes = profile.path, profile.broker.nodes
    kinds = {str(_server(plugins[d.name], d.options_dict)) for d in drivers}
    if not profile.broker.managed or not kinds <= set(NODE_SERVERS):
        raise ProfileError(
            path, f"{where}.action", f"{ev.action} needs every driver's broker to be one mqlab "
            f"manages ({', '.join(NODE_SERVERS)}): set [broker] managed = true and limit the "
            "scenario with drivers = [...]",
        )  # fmt: skip
    others = sorted(k for k in kinds if k != "rabbitmq")
    if others and (ev.action in _RABBITMQ_ONLY or ev.node == "queues"):
        what = ev.action if ev.action in _RABBITMQ_ONLY else 'node = "queues"'
        raise ProfileError(
            path, f"{where}.action", f"{what} is RabbitMQ's (its management API); "
            f"{', '.join(others)} has it not: name a node, or limit the scenario with drivers",
        )  # fmt: skip
    if "kafka" in kinds and nodes == 1:
        # a single managed Kafka runs as one plain process, not as a node mqlab can stop and
        # start again on its data (a replicated one does): refused here, not mid-step
        raise ProfileError(
            path, f"{where}.action", f"{ev.action}: a single managed Kafka cannot be stopped "
            "and started as a node; set [broker] nodes = 3 (a replicated Kafka), or limit the "
            "scenario with drivers",
        )  # fmt: skip
    # Artemis pairs a primary (node1) with a backup (node2), whatever nodes says above 2
    has = min(nodes, 2) if kinds == {"artemis"} else nodes
    if node_index(ev.node) > has:
        raise ProfileError(
            path, f"{where}.node", f"{ev.node}: the managed broker has {has} node(s); "
            "raise [broker] nodes" + (" (Artemis: node1 the primary, node2 its backup)"
                                      if "artemis" in kinds else ""),
        )  # fmt: skip
