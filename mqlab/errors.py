"""mqlab's error tree: one root, context carried as attributes.

Plugins map every library error to one of these at their boundary
(``raise CallTimeout(...) from exc``); nothing from aio-pika, pika, proton or
zmq escapes a plugin. Each transport error also subclasses the matching builtin
so generic ``except ConnectionError`` code keeps working.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

#: one row of an error table: a library's exception type(s) and how to turn one into ours
ErrorRule = tuple[
    type[BaseException] | tuple[type[BaseException], ...],
    Callable[[BaseException], "TransportError"],
]


class MqlabError(Exception):
    """Root of every error mqlab raises on purpose."""


class ProfileError(MqlabError, ValueError):
    """A profile is malformed: names the file, the field path and what was expected."""

    def __init__(self, path: str, field: str, problem: str) -> None:
        self.path = path
        self.field = field
        self.problem = problem
        where = f"{path}: {field}: " if field else f"{path}: "
        super().__init__(f"{where}{problem}")


class PluginError(MqlabError):
    """A plugin is unknown or failed to load; names the plugin and its package."""

    def __init__(self, plugin: str, message: str, package: str | None = None) -> None:
        self.plugin = plugin
        self.package = package
        super().__init__(message)


class OptionError(MqlabError, ValueError):
    """A driver option is unknown to its plugin or has the wrong type/value."""

    def __init__(self, plugin: str, option: str, problem: str) -> None:
        self.plugin = plugin
        self.option = option
        self.problem = problem
        super().__init__(f"plugin {plugin!r}, option {option!r}: {problem}")


class BrokerError(MqlabError):
    """The managed broker could not be started, stopped or reached."""


class BrokerRefused(BrokerError):
    """What was asked of a managed broker is not what mqlab does (a port out of range, a
    state dir holding files mqlab did not make): bad input, refused before anything starts."""


class TransportError(MqlabError):
    """Root of the errors a transport raises while moving messages.

    ``kind`` is the name results and the live view count the error under.
    """

    kind = "DriverError"


class Undeliverable(TransportError):
    """Nobody listens on the target (e.g. AMQP basic.return with mandatory)."""

    kind = "Undeliverable"


class CallTimeout(TransportError, TimeoutError):
    """A call got no reply within its timeout."""

    kind = "CallTimeout"


class ConnectionLost(TransportError, ConnectionError):
    """The connection to the broker or peer failed and was not recovered."""

    kind = "ConnectionLost"


class ConnectFailed(TransportError, ConnectionError):
    """The first connection could not be made (refused, unreachable, bad login, bad vhost)."""

    kind = "ConnectFailed"


class DriverError(TransportError):
    """Any other failure inside a driver."""

    kind = "DriverError"


@contextlib.contextmanager
def map_errors(rules: Sequence[ErrorRule]) -> Iterator[None]:
    """Turn a library's exceptions into mqlab's at a plugin boundary.

    ``rules`` is a table, most specific type first; the first row whose type
    matches builds the mqlab error, raised ``from`` the original. mqlab's own
    errors pass through; anything the table does not name is re-raised as it
    is (the core counts it as ``Unmapped:<Type>``, which shows what to add).
    Model: httpx's ``map_httpcore_exceptions``.

    >>> rules = [(ConnectionRefusedError, lambda e: ConnectFailed(f"refused: {e}"))]
    >>> with map_errors(rules):  # doctest: +SKIP
    ...     await library.connect()
    """
    try:
        yield
    except TransportError:
        raise
    except Exception as exc:
        told = mapped(exc, rules)
        if told is None:
            raise
        raise told from exc


def mapped(exc: BaseException, rules: Sequence[ErrorRule]) -> TransportError | None:
    """``exc`` as :func:`map_errors` would raise it, for an error that is reported rather than
    raised (a callback's): mqlab's own as it is, the first matching rule's, None when no rule
    names it."""
    if isinstance(exc, TransportError):
        return exc
    for kind, make in rules:
        if isinstance(exc, kind):
            return make(exc)
    return None
