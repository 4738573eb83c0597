"""Seed 002's many queues as a scenario states them: M queues (``targets``), a fixed
``batch`` of casts, drained by ``consumers`` connections, in one process each or in
``consumer_processes`` processes, the queues pre-filled (``prefill``) or fed while
they drain."""

from __future__ import annotations

from dataclasses import dataclass

from mqlab.config import limits
from mqlab.config.fields import FieldReader


@dataclass(frozen=True, slots=True)
class Draining:
    """The many-queues fields of one scenario, checked against each other."""

    targets: int = 1
    #: server connections sharing the step's servers x targets queues round robin (seed
    #: 002's N consumers over M queues); 0: one connection (and process) per server
    consumers: int = 0
    #: processes the ``consumers`` connections live in (round robin); 0: one each
    consumer_processes: int = 0
    #: a closed loop's fixed batch: messages sent in all, as fast as the driver takes
    #: them, then none (0: senders send until the window ends)
    batch: int = 0
    #: the batch is published into the queues before any consumer reads them: the
    #: consumers start once every client has sent its share (seed 002's order)
    prefill: bool = False


def parse_draining(
    r: FieldReader, pattern: str, closed_loop: bool, servers: int, fanout: bool, targeted: bool
) -> Draining:
    """The scenario's ``targets``, ``consumers``, ``consumer_processes``, ``batch`` and
    ``prefill``; a shape the machine cannot run is one line naming its field."""
    consumers = r.count("consumers", 0, 0, limits.MAX_SHARED_TARGETS)
    batch = r.count("batch", 0, 0, limits.MAX_BATCH)
    if batch and not closed_loop:
        raise r.fail("batch", "a fixed batch is sent by a closed loop: give concurrency, not rate")
    targets = r.count("targets", 1, 1, limits.MAX_SHARED_TARGETS)
    if targets > limits.MAX_TARGETS and not consumers:
        raise r.fail(
            "targets",
            f"{targets} targets would be {targets} server processes (the limit is "
            f"{limits.MAX_TARGETS}); add consumers = N to share them among N processes",
        )
    if consumers > servers * targets:
        raise r.fail(
            "consumers",
            f"{consumers} consumers for {servers * targets} queues (servers x targets): "
            "each needs at least one; lower consumers",
        )
    processes = r.count("consumer_processes", 0, 0, limits.MAX_SHARED_TARGETS)
    if processes and not consumers:
        raise r.fail(
            "consumer_processes",
            "puts the consumers' connections into fewer processes: give consumers = N too",
        )
    if processes > consumers:
        raise r.fail(
            "consumer_processes",
            f"{processes} processes for {consumers} consumer connections: each process needs "
            "one; lower consumer_processes",
        )
    prefill = r.boolean("prefill", False)
    if prefill:
        if not batch:
            raise r.fail("prefill", "pre-fills the queues with a fixed batch: give batch = N too")
        if pattern != "cast" or fanout or targeted:
            raise r.fail(
                "prefill",
                "the queues pre-filled are the topics' shared queues: a cast scenario without "
                "fanout or targeted",
            )
    return Draining(targets, consumers, processes, batch, prefill)
