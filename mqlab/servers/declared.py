"""Servers plugins ship (entry-point group ``mqlab.servers``), started as mqlab's own.

A plugin's :class:`mqlab.sdk.server.Server` says which binary to run and how; here it is
adopted as a :class:`~mqlab.servers.daemons.Daemon`: a child process on free loopback ports
with its own state directory, waited for, stopped by PID, its PID in the handle so the run
samples its CPU beside the workers'. A declared server is one more broker side
(:class:`Side`): its PID for CPU, its ``depth`` for the drain.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from mqlab.errors import BrokerError, PluginError
from mqlab.finder import SERVERS, discover, import_class
from mqlab.sdk.server import Launch, Server
from mqlab.servers.brokerside import Depth, ServerSide
from mqlab.servers.daemons import Daemon


class Adopted(Daemon):
    """A plugin's server, run the way mqlab runs its own daemons."""

    def __init__(self, kind: str, server: Server) -> None:
        super().__init__()
        self.kind = kind
        self.server = server
        self.label = server.label or kind
        self.binary = server.binary
        self.package = server.package
        self.version_argv = server.version_argv
        self.ready_within = server.ready_within

    def launch(self, state_dir: Path) -> Launch:
        return self.server.launch(state_dir)


def names() -> list[str]:
    """The server kinds installed plugins declare (nothing imported)."""
    return list(discover(group=SERVERS))


def load(kind: str) -> Adopted | None:
    """The server a plugin registered as ``kind``, adopted; None when none did. A plugin
    whose server fails to import is a BrokerError naming its package."""
    found = discover(group=SERVERS).get(kind)
    if found is None:
        return None
    try:
        cls = cast("type[Server]", import_class(found, Server, "mqlab.sdk.server.Server"))
    except PluginError as exc:
        raise BrokerError(str(exc)) from exc
    return Adopted(kind, cls())


class Side(ServerSide):
    """A plugin's server as a step's broker: managed (``pids`` its own) or given; its depth
    is the plugin's ``Server.depth`` at the driver's first URL."""

    reads_depth = True

    def __init__(
        self,
        kind: str,
        urls: tuple[str, ...],
        facts: Mapping[str, Any],
        pids: tuple[int, ...],
        server: Server,
    ) -> None:
        super().__init__(kind, urls, facts, pids, managed=bool(pids))
        self.server = server
        self.url = urls[0]

    async def depth(self, marker: str) -> tuple[Depth, ...]:
        try:
            found = await self.server.depth(self.url, marker)
        except Exception as exc:  # noqa: BLE001 - unknown is what the drain reports then
            why = f"the {self.kind} server could not be asked ({type(exc).__name__})"
            return (Depth(self.kind, None, why=why),)
        if found is None:
            return (Depth(self.kind, None, why=f"the {self.kind} server could not tell"),)
        return (Depth(self.kind, found),)
