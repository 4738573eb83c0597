"""The pika plugin's options and the settings derived from them.

Defaults follow oslo.messaging's pika driver (``[oslo_messaging_pika]``) where
it had one: infinite send retries, 3 s heartbeats, a 0.25 s TCP_USER_TIMEOUT,
0.25 s between reconnection rounds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mqlab.transport import Option

OPTIONS: Mapping[str, Option] = {
    "retry": Option(
        (int,),
        None,
        "send attempts after a connection failure: 0 = pure at-most-once (no-ack consumers, "
        "nothing republished), N = up to N republishes, None or -1 = forever (oslo's default)",
        allow_none=True,
        minimum=-1,
        feature="at_most_once",
        needs=(0,),
    ),
    "mandatory": Option(
        (bool,),
        True,
        "publish RPC calls and casts as mandatory: fail fast with Undeliverable when nobody "
        "listens instead of waiting for the call timeout; turns publisher confirms on, so "
        "each such send waits for the broker's confirm",
        feature="mandatory",
        needs=(True,),
    ),
    "heartbeat": Option(
        (int,),
        3,
        "AMQP heartbeat timeout in seconds (pika's own heartbeats); 0 disables, None takes "
        "the broker's value",
        allow_none=True,
        minimum=0,
    ),
    "tcp_user_timeout": Option(
        (int, float),
        0.25,
        "TCP_USER_TIMEOUT in seconds: how long sent data may stay unacknowledged before the "
        "kernel drops the connection (fast failure detection when sending); Linux counts a "
        "closed receive window too, so a broker whose flow control stops reading for longer "
        "drops a healthy connection (see docs/findings.md); 0 disables",
        allow_none=True,
        minimum=0,
    ),
    "prefetch": Option(
        (int,),
        64,
        "unacknowledged messages the broker may push to each acked consumer (retry != 0); "
        "0 = unlimited",
        minimum=0,
        maximum=65535,  # basic.qos carries prefetch-count as an AMQP short
    ),
    "retry_delay": Option(
        (int, float),
        0.25,
        "seconds between reconnection rounds over the URL list",
        minimum=0,
    ),
    "connections": Option(
        (str,),
        "single",
        "single: one connection for sending and consuming (oslo's pika driver's "
        "connection_factory default); pool: one connection to send and one to consume and "
        "answer (its read_write factory; kombu's pool)",
        choices=("single", "pool"),
    ),
    "connect_timeout": Option(
        (int, float),
        10.0,
        "seconds start() may spend trying the URLs, and a send may wait for a reconnection "
        "(unless retry is forever)",
        minimum=0.01,
    ),
}


@dataclass(frozen=True, slots=True)
class Settings:
    """Checked option values, with the facts the transport derives from them."""

    retry: int | None  # None: forever
    mandatory: bool
    heartbeat: int | None
    tcp_user_timeout: float
    prefetch: int
    retry_delay: float
    connect_timeout: float
    pooled: bool = False  # connections = "pool": sending on a connection of its own

    @property
    def acked(self) -> bool:
        """Consumers ack after the handler; retry=0 consumes with no_ack (at-most-once)."""
        return self.retry != 0

    @property
    def resends(self) -> bool:
        """A send waits for its confirm so it can be resent after a failure."""
        return self.retry != 0

    @property
    def confirms(self) -> bool:
        """Publisher confirms: to republish what was not confirmed, and to see returns."""
        return self.retry != 0 or self.mandatory

    def retries_left(self, attempts: int) -> bool:
        """May a message whose send failed ``attempts`` times be sent again?"""
        return self.retry is None or attempts <= self.retry


def make_settings(opts: Mapping[str, Any]) -> Settings:
    """Turn checked option values into :class:`Settings`."""
    retry = opts["retry"]
    return Settings(
        retry=None if retry == -1 else retry,
        mandatory=opts["mandatory"],
        heartbeat=opts["heartbeat"],
        tcp_user_timeout=float(opts["tcp_user_timeout"] or 0),
        prefetch=opts["prefetch"],
        retry_delay=float(opts["retry_delay"]),
        connect_timeout=float(opts["connect_timeout"]),
        pooled=opts["connections"] == "pool",
    )
