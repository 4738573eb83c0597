"""What a profile's events ask of this host and broker, refused before anything starts.

Node actions need a managed RabbitMQ (mqlab starts, stops and kills its nodes by
PID); ``loss`` needs ``tc netem`` (root and the kernel module), which the fault
proxy cannot imitate (it sees a byte stream, not packets); worker actions need
server workers of their own. Each refusal is one line naming the field and what
is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from mqlab.config.events import node_index
from mqlab.errors import ProfileError

if TYPE_CHECKING:
    from mqlab.config.profile import Profile
    from mqlab.registry import LoadedPlugin


def netem_missing() -> str:
    """ "" when ``tc netem`` could run here, else what is missing (one phrase)."""
    if shutil.which("tc") is None:
        return "the tc command (iproute2)"
    if os.geteuid() != 0:
        return "root (tc netem changes a network namespace's qdisc)"
    release = os.uname().release
    modules = Path("/proc/modules")
    loaded = modules.exists() and "sch_netem" in modules.read_text()
    found = any(Path(f"/lib/modules/{release}/kernel/net/sched").glob("sch_netem.ko*"))
    if not (loaded or found):
        return f"the sch_netem kernel module (not in /lib/modules/{release})"
    return ""


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
                rabbit = any(plugins[d.name].cls.features.server == "rabbitmq" for d in drivers)
                if not (profile.broker.managed and rabbit):
                    raise ProfileError(
                        path, f"{where}.action", f"{ev.action} needs a RabbitMQ node mqlab "
                        "manages: set [broker] managed = true (and a RabbitMQ driver)",
                    )  # fmt: skip
                if node_index(ev.node) > profile.broker.nodes:
                    raise ProfileError(
                        path, f"{where}.node", f"{ev.node}: the cluster has "
                        f"{profile.broker.nodes} node(s); raise [broker] nodes",
                    )  # fmt: skip
            elif ev.kind == "link":
                if ev.action == "loss":
                    missing = netem_missing() or "mqlab's netem path (not built yet)"
                    raise ProfileError(
                        path, f"{where}.action", f"loss needs tc netem, and this host lacks "
                        f"{missing}; the fault proxy does delay, bandwidth, cut, reset",
                    )  # fmt: skip
                if any(plugins[d.name].cls.features.server is None for d in drivers):
                    raise ProfileError(
                        path, f"{where}.action", f"{ev.action} sits between workers and a "
                        "server: limit the scenario to drivers with one (drivers = [...])",
                    )  # fmt: skip
            else:
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
