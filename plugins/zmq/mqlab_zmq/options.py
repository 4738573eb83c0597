"""The ``zmq`` plugin's options: the schema, and the combinations it cannot express.

Which matchmaker and where, how long a client trusts its answers, the sockets'
high-water marks and linger, and the address servers bind and advertise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from mqlab.transport import Option, OptionConflict

#: addresses that listen on every interface: clients cannot connect to them
_WILDCARDS = frozenset({"0.0.0.0", "*", "::", "[::]"})

#: the transport's ``option_specs``
OPTIONS: Mapping[str, Option] = {
    "matchmaker": Option(
        (str,),
        "static",
        "where servers publish their endpoints: static (file registry) or redis",
        choices=("static", "redis"),
    ),
    "registry_dir": Option(
        (str,),
        None,
        "static matchmaker directory; default: a temp dir keyed by user and broker URL",
        allow_none=True,
    ),
    "redis_url": Option((str,), "redis://127.0.0.1:6379/0", "redis matchmaker URL"),
    "ttl": Option(
        (int, float),
        10,
        "redis: seconds a registration lives unless refreshed (every ttl/3)",
        minimum=0.01,
    ),
    "lookup_cache": Option(
        (int, float),
        1.0,
        "seconds a client trusts a matchmaker answer before asking again",
        minimum=0,
    ),
    "hwm": Option(
        (int,),
        1000,
        "ZMQ_SNDHWM and ZMQ_RCVHWM of every socket, in messages (0: unlimited)",
        minimum=0,
    ),
    "linger": Option(
        (int,),
        1000,
        "ms a closing socket may keep flushing queued messages (0: drop them; never "
        "infinite, which could hang close)",
        minimum=0,
    ),
    "send_timeout": Option(
        (int, float),
        5.0,
        "seconds a cast or notify may wait for a peer's queue (None: wait forever)",
        allow_none=True,
        minimum=0.001,
    ),
    "bind_address": Option(
        (str,), "127.0.0.1", "interface servers bind their ephemeral TCP ports on"
    ),
    "host": Option(
        (str,),
        None,
        "address servers advertise to clients; default: bind_address",
        allow_none=True,
    ),
}


def check_combinations(options: Mapping[str, Any]) -> None:
    """Values and combinations the schema cannot express."""
    opts = options
    if not opts["bind_address"]:
        raise OptionConflict("bind_address", "must not be empty (e.g. 127.0.0.1)")
    if opts["bind_address"] in _WILDCARDS and not opts["host"]:
        raise OptionConflict(
            "host",
            f"bind_address {opts['bind_address']!r} listens everywhere; set host to the "
            "address clients should connect to",
        )
    scheme = opts["redis_url"].split("://", 1)[0]
    if opts["matchmaker"] == "redis" and scheme not in ("redis", "rediss", "unix"):
        raise OptionConflict(
            "redis_url", "expected redis://host:port/db, rediss://... or unix://..."
        )


def _loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    return host in ("localhost", "::1") or host.startswith("127.")


def across_hosts(options: Mapping[str, Any]) -> str | None:
    """Why these options cannot put servers and clients on different machines; None if
    they can. zmq has no broker: a client finds a server through the matchmaker and
    connects to the address the server advertises, so both must reach across machines."""
    opts = options
    if opts["matchmaker"] == "static" and not opts["registry_dir"]:
        return (
            "the static matchmaker keeps its registry in a temporary directory of each "
            'machine\'s own, so no client finds a server: set matchmaker = "redis" with a '
            "redis_url every host reaches (or registry_dir on a file system they all share)"
        )
    if opts["matchmaker"] == "redis":
        url = urlsplit(opts["redis_url"])
        if url.scheme == "unix" or _loopback(url.hostname or "localhost"):
            return (
                "redis_url is on each machine's own loopback (or a local socket), so each host "
                "has a matchmaker of its own: give a Redis every host reaches"
            )
    advertised = opts["host"] or opts["bind_address"]
    if _loopback(advertised):
        return (
            f"servers advertise {advertised}, which no other machine reaches: set "
            "bind_address (and host) to an address of the servers' host that the clients' "
            "hosts reach"
        )
    return None
