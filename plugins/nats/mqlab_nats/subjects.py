"""Where each mqlab target lives in NATS: subjects, queue groups and JetStream names.

NATS subjects are dot-separated tokens; whitespace, ``*`` and ``>`` (wildcards)
cannot appear in a name, so they become ``_``. Each kind of message has its own
first token, so an RPC topic can never receive a notification and a targeted
call can never land in the topic's shared queue group.
"""

from __future__ import annotations

import re

from mqlab.transport import Target

_NOT_IN_SUBJECT = re.compile(r"[\s*>]")
_NOT_IN_STREAM = re.compile(r"[^A-Za-z0-9_-]")


def token(name: str) -> str:
    return _NOT_IN_SUBJECT.sub("_", name) or "_"


def rpc(target: Target) -> str:
    """Shared by the topic's servers (one queue group), or one server's, or everyone's."""
    kind, names = target.route()
    return ".".join((f"mqlab-{kind}", *map(token, names)))


def rpc_group(target: Target) -> str:
    """The queue group the servers of a topic share its casts and calls in."""
    return token(f"{target.exchange}.{target.topic}")


def notification(target: Target) -> str:
    where = f"{token(target.exchange)}.{token(target.topic)}.{token(target.priority)}"
    return f"mqlab-js.{where}" if target.durable else f"mqlab-note.{where}"


def stream(target: Target) -> str:
    """The JetStream stream holding an exchange's durable notifications."""
    return "mqlab-" + _NOT_IN_STREAM.sub("_", target.exchange)


def stream_subjects(target: Target) -> list[str]:
    return [f"mqlab-js.{token(target.exchange)}.>"]


def durable_name(target: Target, pool: str) -> str:
    """The durable consumer of one pool (JetStream names allow no dots)."""
    return _NOT_IN_STREAM.sub("_", f"{target.topic}-{target.priority}-{pool}")
