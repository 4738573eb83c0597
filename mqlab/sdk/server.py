"""A server a plugin ships, for mqlab to start: the broker mqlab does not know yet.

With ``[broker] managed = true`` mqlab starts one private server of each kind the profile's
drivers name (``Features.server``), hands the drivers its URL, samples its process's CPU
beside the workers, and stops it by PID at the end. RabbitMQ, NATS, Redis, Mosquitto, Kafka
and Artemis are mqlab's own; a plugin brings another kind by subclassing :class:`Server` and
registering it under the entry-point group ``mqlab.servers`` with the name its
``Features.server`` gives::

    [project.entry-points."mqlab.servers"]
    mybus = "mqlab_mybus:MyBusServer"

mqlab runs :meth:`Server.launch`'s command line as its own child process, in the
foreground, with every file in the state directory it gives, waits until the port accepts
connections, and stops it with SIGTERM (then SIGKILL) by PID: nothing relies on, or
disturbs, a system service on the default port.
"""

from __future__ import annotations

import abc
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from mqlab import finder

#: the entry-point group servers register under, by the name ``Features.server`` gives
GROUP = finder.SERVERS


@dataclass(frozen=True, slots=True)
class Launch:
    """One start: the command line (in the foreground), the port it listens on, the URL the
    drivers get."""

    argv: list[str]
    port: int
    url: str


def free_port() -> int:
    """A loopback port nobody listens on now (bound, read, released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class Server(abc.ABC):
    """How mqlab starts one kind of server: a binary, run as a child process."""

    #: shown in progress lines and recorded as the product ("beanstalkd")
    label: ClassVar[str] = ""
    #: the executable's path, and the Debian package that ships it (named when it is missing)
    binary: ClassVar[str] = ""
    package: ClassVar[str] = ""
    #: how the binary prints its version (the first ``x.y`` or ``x.y.z`` in its output)
    version_argv: ClassVar[tuple[str, ...]] = ("--version",)
    #: seconds the server may take to accept connections
    ready_within: ClassVar[float] = 15.0

    @abc.abstractmethod
    def launch(self, state_dir: Path) -> Launch:
        """The command line of one private server: free loopback ports (:func:`free_port`),
        every file it writes inside ``state_dir``, in the foreground."""

    async def depth(self, url: str, marker: str) -> int | None:
        """Messages the server at ``url`` still holds in queues whose name contains
        ``marker`` (a step's drain waits while they come), or None when it cannot tell."""
        return None
