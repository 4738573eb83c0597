"""Where each mqlab target lives in Redis: stream keys and consumer group names.

Every key starts with ``mqlab:`` and the kind of message, so an RPC topic and
a notification topic of the same name never share a stream.

- the servers of a topic share one stream and one group (``servers``);
- a targeted call or cast has the named server's own stream;
- a fanout cast has a stream where each server has a group of its own;
- notifications have one stream per topic and priority, one group per pool;
- a client's replies come back on a stream of its own (no group: one reader).
"""

from __future__ import annotations

from mqlab.transport import Target

#: the group the servers of a topic (or the one server of a targeted stream) share
SERVERS = "servers"

#: fields of a stream entry: the body, and for a call where to reply and with which id
BODY, REPLY_TO, CORRELATION = b"b", b"r", b"c"


def rpc(target: Target) -> str:
    kind, names = target.route()
    return ":".join(("mqlab", kind, *names))


def fanout_group(server: str) -> str:
    return f"server:{server}"


def notification(target: Target) -> str:
    return f"mqlab:note:{target.exchange}:{target.topic}.{target.priority}"


def pool_group(pool: str) -> str:
    return f"pool:{pool}"


def replies(worker: str, unique: str) -> str:
    return f"mqlab:reply:{worker}:{unique}"
