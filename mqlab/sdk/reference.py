"""The reference-loop contract: a plugin's library at its own ceiling, for cast.

A plugin may ship a *reference loop*: the thinnest use of its library for a
cast, with none of mqlab's per-message work. ``mqlab ceiling`` runs it on the
same server, with the same message size and the same acknowledgement mode,
right after the plugin's own cast step, and shows the plugin's rate as a share
of it. A plugin registers it under the entry-point group ``mqlab.references``
with the plugin's own name::

    [project.entry-points."mqlab.references"]
    mybus = "mqlab_mybus.reference:MyBusReference"

The core finds it by its entry point, as it finds transports, and runs it in
two processes of its own (a consumer, then a publisher): :mod:`mqlab.ceiling.refloop`. Both methods
block: a library with an event loop runs it inside them. Each counts its
messages in ``tally.n`` (a plain ``int`` increment, the only per-message cost
allowed) and returns soon after ``tally.stop`` becomes true, which the core
sets from another thread at the end of the window.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint
from typing import Any, ClassVar, cast

import uvloop

from mqlab import finder
from mqlab.errors import PluginError

#: the entry-point group reference loops register under, by plugin name
GROUP = finder.REFERENCES


class Tally:
    """A loop's message count, read by the core from its sampling thread."""

    __slots__ = ("n", "stop")

    def __init__(self) -> None:
        self.n = 0  # messages published (publisher) or received (consumer) so far
        self.stop = False  # set by the core: return as soon as you can


@dataclass(frozen=True, slots=True)
class ReferenceSpec:
    """What both processes of one reference loop share."""

    urls: tuple[str, ...]  # the driver's server URLs, as the plugin's step used them
    name: str  # unique to this loop: the queue, address or key to use
    size: int  # bytes per message body: the plugin's encoded message length
    #: the driver's checked options (defaults filled): the loop mirrors the
    #: plugin's acknowledgement mode and consumer window from them
    options: Mapping[str, Any] = field(default_factory=dict)
    #: what the consumer passed to ``ready`` (e.g. the address it bound); publisher only
    peer: str = ""
    #: the step's senders, the most casts it could have in flight at once (0: unknown, an
    #: open-loop step): a loop that keeps several sends in flight keeps at most this many,
    #: so it is not measured in a setting the plugin's step could not have
    concurrency: int = 0

    @property
    def body(self) -> bytes:
        return b"x" * self.size


class ReferenceLoop(abc.ABC):
    """Base class of a plugin's reference loop for cast."""

    #: the distribution whose version is shown beside the ceiling (``"pika"``)
    library: ClassVar[str] = ""

    def __init__(self, spec: ReferenceSpec) -> None:
        self.spec = spec

    def in_flight(self, window: int) -> int:
        """Sends to keep in flight: ``window``, or the step's senders when fewer (a plugin
        whose casts each wait for an answer has no more in flight than its step's senders)."""
        concurrency = self.spec.concurrency
        return min(window, concurrency) if concurrency > 0 else window

    @classmethod
    def auto_ack(cls, options: Mapping[str, Any]) -> bool:
        """True when the plugin, with these options, consumes casts without acks.

        PerfTest runs with ``-a`` then; the loop's consumer must do the same.
        """
        return False

    @classmethod
    def confirms(cls, options: Mapping[str, Any]) -> str | None:
        """The option that makes the plugin's casts wait for a publisher confirm each, as
        ``"name = value"``, or None. The loop and PerfTest publish without confirms, so
        ``mqlab ceiling`` says so under its table: the two rates are not like for like.
        """
        return None

    @classmethod
    def describe(cls, options: Mapping[str, Any]) -> str:
        """The mode the loop ran in, shown beside its rate."""
        return "auto-ack" if cls.auto_ack(options) else "ack each message"

    @abc.abstractmethod
    def consume(self, tally: Tally, ready: Callable[[str], None]) -> None:
        """Declare what the loop needs, consume ``spec.name``, call ``ready(peer)`` once
        consuming (``peer``: what the publisher must know, or ``""``), count every
        delivery in ``tally.n`` until ``tally.stop``; then release everything."""

    @abc.abstractmethod
    def publish(self, tally: Tally) -> None:
        """Publish ``spec.body`` to ``spec.name`` (or ``spec.peer``) as fast as the library
        allows, counting each in ``tally.n``, until ``tally.stop``."""


class AsyncReferenceLoop(ReferenceLoop):
    """A reference loop for an asyncio library: write ``aconsume`` and ``apublish``.

    Each runs on uvloop, as mqlab's workers do; :func:`until_stopped` waits for the end.
    """

    def consume(self, tally: Tally, ready: Callable[[str], None]) -> None:
        uvloop.run(self.aconsume(tally, ready))

    def publish(self, tally: Tally) -> None:
        uvloop.run(self.apublish(tally))

    @abc.abstractmethod
    async def aconsume(self, tally: Tally, ready: Callable[[str], None]) -> None:
        """As :meth:`ReferenceLoop.consume`, on the running event loop."""

    @abc.abstractmethod
    async def apublish(self, tally: Tally) -> None:
        """As :meth:`ReferenceLoop.publish`, on the running event loop."""


async def until_stopped(tally: Tally, tick: float = 0.1) -> None:
    """Return once the core set ``tally.stop`` (looked at every ``tick`` seconds)."""
    while not tally.stop:
        await asyncio.sleep(tick)


#: seconds a loop's coroutines have, once ``tally.stop`` is set, to return by themselves
#: before they are cancelled
STOP_GRACE = 2.0


async def run_until_stopped(tally: Tally, *work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` (coroutines, as tasks) until the core sets ``tally.stop``. The first error
    any of it raises ends the loop and is raised as itself, not inside an ExceptionGroup, so
    the core's one line names it.

    Cancellation safety: once ``tally.stop`` is set each coroutine returns by itself, at a
    point of its own choosing (between library calls; look at ``tally.stop`` there); only
    what has not returned within :data:`STOP_GRACE` seconds is cancelled. A library
    cancelled in the middle of a call (inside a transaction, a flush, a confirm wait) may
    hang or leave its connection unusable, and the loop would then never report."""
    tasks = [asyncio.ensure_future(each) for each in work]
    stopped = asyncio.ensure_future(until_stopped(tally))
    try:
        pending: set[asyncio.Future[None]] = {stopped, *tasks}
        while not stopped.done():
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stopped and (exc := task.exception()) is not None:
                    raise exc
        if pending:
            await asyncio.wait(pending, timeout=STOP_GRACE)
        for task in tasks:
            if task.done() and not task.cancelled() and (exc := task.exception()) is not None:
                raise exc
    finally:
        for task in (stopped, *tasks):
            task.cancel()
        await asyncio.gather(stopped, *tasks, return_exceptions=True)


def load(plugin: str) -> type[ReferenceLoop]:
    """Import the reference loop of ``plugin`` through the plugins' finder; PluginError naming
    the plugin when it ships none, or when it fails to load. ``plugin`` may also be a loop's
    import path, ``"package.module:Class"``: one not installed yet (the kit's
    ``Subject.reference``)."""
    if ":" in plugin:
        point = EntryPoint(name=plugin, value=plugin, group=GROUP)
        found: finder.Plugin | None = finder.Plugin(plugin, "(not installed)", "?", point)
    else:
        found = finder.discover(group=GROUP).get(plugin)
    if found is None:
        raise PluginError(plugin, f"plugin {plugin!r} ships no reference loop (group {GROUP})")
    cls = finder.import_class(found, ReferenceLoop, "mqlab.sdk.reference.ReferenceLoop")
    return cast("type[ReferenceLoop]", cls)
