"""Where each mqlab target lives in Kafka: topic names and consumer group ids.

Every topic starts with ``mqlab.`` and the kind of message, so an RPC topic and
a notification topic of the same name never share a topic:

- the servers of a topic share one topic and one group (``~servers``);
- a targeted call or cast has the named server's own topic;
- a fanout cast has a topic where each server has a group of its own;
- notifications have one topic per topic and priority, one group per pool;
- a client's replies come back on a topic of its own (one partition, no group).

A group's id is its topic's name, ``~`` and the member kind: the groups that
read a topic are those whose id starts with ``<topic>~``, which is how a closing
transport tells whether anyone still reads a topic before deleting it.

Kafka allows ``[A-Za-z0-9._-]`` in a topic name, 249 characters at most: any
other character of an mqlab name, and ``.`` and ``_`` themselves (``.`` joins
the parts), is written ``_`` plus its code point in hex, so two names never meet.
"""

from __future__ import annotations

import re

from mqlab.transport import Target

#: what separates a topic from the member kind in a group id (never in a topic name)
GROUP_SEP = "~"
#: the longest topic name Kafka accepts
MAX_TOPIC = 249

#: record headers of a call: where to reply, and the id the reply carries back
REPLY_TO, CORRELATION = "r", "c"

_UNSAFE = re.compile(r"[^A-Za-z0-9-]")


def _escape(name: str) -> str:
    return _UNSAFE.sub(lambda m: f"_{ord(m.group()):x}_", name)


def _topic(*parts: str) -> str:
    name = ".".join(["mqlab", *(_escape(p) for p in parts)])
    if len(name) > MAX_TOPIC:
        raise ValueError(f"Kafka topic name longer than {MAX_TOPIC} characters: {name[:60]}...")
    return name


def rpc(target: Target) -> str:
    kind, names = target.route()
    return _topic(kind, *names)


def notification(target: Target) -> str:
    return _topic("note", target.exchange, target.topic, target.priority)


def replies(worker: str, unique: str) -> str:
    return _topic("reply", worker, unique)


def group(topic: str, member: str) -> str:
    return f"{topic}{GROUP_SEP}{member}"


def servers_group(topic: str) -> str:
    """The group the servers of a topic (or the one server of a targeted topic) share."""
    return group(topic, "servers")


def server_group(topic: str, server: str) -> str:
    """A fanout topic's group of one server: each server reads every cast."""
    return group(topic, f"server:{server}")


def pool_group(topic: str, pool: str) -> str:
    return group(topic, f"pool:{pool}")


def read_by(topic: str, groups: list[str]) -> list[str]:
    """The groups among ``groups`` that read ``topic``."""
    prefix = topic + GROUP_SEP
    return [g for g in groups if g.startswith(prefix)]
