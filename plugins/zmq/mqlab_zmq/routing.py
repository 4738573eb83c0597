"""Which server a client sends to: matchmaker keys and the client-side choice.

ZeroMQ has no broker to route for us, so the client decides from the
matchmaker's list: round robin across a topic's servers (or within one named
server's instances, or within one notification pool), starting at a random
position so many clients spread over the servers from their first message.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from mqlab.errors import Undeliverable
from mqlab.transport import Target
from mqlab_zmq.directory import Entry
from mqlab_zmq.matchmaker import Key, Record


def rpc_key(target: Target) -> Key:
    return ("rpc", target.exchange, target.topic)


def notify_key(target: Target) -> Key:
    # the priority is part of the topic, as in the AMQP routing key <topic>.<priority>
    return ("notify", target.exchange, f"{target.topic}.{target.priority}")


class Picker:
    """Picks the record a message goes to; ``where`` describes a target for errors."""

    def __init__(self, where: Callable[[Target], str]) -> None:
        self._where = where
        self._rr: dict[tuple[Key, str], int] = {}

    def nobody(self, target: Target) -> Undeliverable:
        return Undeliverable(
            f"no zmq server serves {self._where(target)}; start one, or check the topic, "
            "exchange and matchmaker options"
        )

    def round_robin(self, key: Key, group: str, records: list[Record]) -> Record:
        rr = (key, group)
        i = self._rr.get(rr)
        if i is None:
            # spread many clients over the servers from their very first message
            i = random.randrange(len(records))
        self._rr[rr] = i + 1
        return records[i % len(records)]

    def pick(self, key: Key, entry: Entry, target: Target) -> Record:
        """One server of ``target``: the named one if ``target.server``, else any."""
        if target.server:
            named = entry.by_server.get(target.server)
            if not named:
                known = ", ".join(sorted(entry.by_server)) or "none"
                raise Undeliverable(
                    f"no zmq server named {target.server!r} serves {self._where(target)} "
                    f"(servers of this topic: {known})"
                )
            return named[0] if len(named) == 1 else self.round_robin(key, target.server, named)
        records = entry.records
        if len(records) == 1:  # the usual case, checked first: no round robin to keep
            return records[0]
        if not records:
            raise self.nobody(target)
        return self.round_robin(key, "", records)
