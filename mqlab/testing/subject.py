"""What the conformance kit tests: a transport, how to reach its server, and its quirks.

A plugin author describes their transport once, as a :class:`Subject`; every
check of the kit builds its transports from it through :func:`build`, the same
path a worker takes (options checked against the plugin's schema, then the
class constructed with a :class:`~mqlab.transport.TransportConfig`).
"""

from __future__ import annotations

import socket
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mqlab import registry
from mqlab.transport import Transport

#: The password the kit puts in URLs it expects a transport to mask in messages.
SECRET = "kit-secret-pw"

#: Lists what a transport left on its server: the names of objects (queues,
#: exchanges, connections, keys, ...) whose name contains the given tag.
Leftovers = Callable[[str], Sequence[str]]


@dataclass(frozen=True)
class Subject:
    """The transport under test.

    ``transport`` is a plugin name (as registered under ``mqlab.transports``) or
    the Transport subclass itself. Every other field is optional:

    - ``urls``: the running server every check connects to (``()`` if none);
    - ``options``: driver options every transport of the kit gets;
    - ``mandatory_options``: added for the "call nobody listens to" check when
      ``Features.mandatory`` is declared: the options under which such a call
      fails fast with Undeliverable (``{}`` if it always does);
    - ``at_most_once_options``: with ``Features.at_most_once``, the options that
      configure pure at-most-once delivery (the concurrency check runs again);
    - ``unreachable_urls`` / ``unreachable_options``: where start() must fail
      with ConnectFailed; put :data:`SECRET` in the password. By default the
      first URL with its port swapped for a closed one and SECRET as password;
    - ``bad_options``: more ``{option: value}`` pairs that must be refused with
      OptionError (bounds) beyond those the kit derives, each alone;
    - ``bad_combinations``: option sets each value of which is fine alone but not with the
      others (``{"no_ack": True, "multi_ack": 2}``): each set is refused as a whole, with an
      OptionError naming one of its options (``Transport.check_combinations``);
    - ``leftovers``: lists objects left on the server (for RabbitMQ:
      ``RabbitMQ(management_url).leftovers``);
    - ``arrival``: seconds the kit waits for messages that should arrive;
    - ``queue_types``: with ``Features.queue_types``, the type of each server-side queue
      whose name contains the tag (for RabbitMQ: ``RabbitMQ(management_url).queue_types``);
    - ``drop``: deletes what a check left on purpose (durable quorum queues outlive a
      close); for RabbitMQ: ``RabbitMQ(management_url).drop``;
    - ``ceiling``: False for a transport with no library beneath it to measure (mqlab's
      own loopback); every other plugin ships a reference loop, and the kit runs it;
    - ``idle``: seconds the idle check leaves the connections unused before it sends again
      (longer than the 5 s socket read timeout some client libraries default to);
    - ``drops``: False when the transport's messages do not cross ``urls`` (zmq's peers
      talk directly), so dropping the connections to ``urls`` tells nothing;
    - ``reference``: the import path of the plugin's reference loop
      (``"package.module:Class"``) when it is not installed under ``mqlab.references``;
    - ``restart``: restarts the server at ``urls`` on the same port with the same data
      (blocking; ``restart(True)`` kills it with SIGKILL first, as a crash would): the kit's
      server-restart and kill checks run only with it.
    """

    transport: str | type[Transport]
    urls: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    mandatory_options: Mapping[str, Any] = field(default_factory=dict)
    at_most_once_options: Mapping[str, Any] = field(default_factory=dict)
    unreachable_urls: tuple[str, ...] | None = None
    unreachable_options: Mapping[str, Any] = field(default_factory=dict)
    bad_options: Mapping[str, Any] = field(default_factory=dict)
    bad_combinations: Sequence[Mapping[str, Any]] = ()
    leftovers: Leftovers | None = None
    arrival: float = 10.0
    queue_types: Callable[[str], Mapping[str, str]] | None = None
    drop: Callable[[str], None] | None = None
    ceiling: bool = True
    idle: float = 7.0
    drops: bool = True
    reference: str = ""
    restart: Callable[[bool], None] | None = None

    @property
    def name(self) -> str:
        """The plugin name OptionError messages carry."""
        if isinstance(self.transport, str):
            return self.transport
        return self.transport.__name__

    def load(self) -> registry.LoadedPlugin:
        """The plugin as a worker sees it: by its registered name, or the class as given."""
        if isinstance(self.transport, str):
            return registry.get(self.transport)
        return registry.LoadedPlugin(self.name, "(not installed)", "?", self.transport)

    def unreachable(self) -> tuple[str, ...] | None:
        """URLs start() cannot connect to, or None if the kit cannot make some up."""
        if self.unreachable_urls is not None:
            return self.unreachable_urls
        if not self.urls:
            return None
        parts = urllib.parse.urlsplit(self.urls[0])
        netloc = f"mqlab:{SECRET}@127.0.0.1:{closed_port()}"
        return (urllib.parse.urlunsplit(parts._replace(netloc=netloc)),)


def build(
    subject: Subject, worker: str, options: Mapping[str, Any], urls: tuple[str, ...] | None = None
) -> Transport:
    """Check ``options`` and construct (not start) a transport, as a worker does."""
    plugin = subject.load()
    return plugin.build(
        subject.urls if urls is None else urls, {**subject.options, **options}, worker
    )


def closed_port() -> int:
    """A loopback TCP port nobody listens on (bound, read, released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
