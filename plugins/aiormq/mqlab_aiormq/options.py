"""The options the aiormq plugin accepts, and the checks on their combinations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mqlab.transport import Option, OptionConflict

OPTIONS: Mapping[str, Option] = {
    "prefetch": Option(
        (int,),
        64,
        "basic.qos prefetch_count per consumer (0 = unlimited; ignored with no_ack)",
        minimum=0,
        maximum=65535,
    ),
    "multi_ack": Option(
        (int,),
        1,
        "ack every N deliveries with one multiple ack; a partial batch is acked when idle",
        minimum=1,
    ),
    "confirm": Option((bool,), True, "publisher confirms: a send returns once the broker took it"),
    "no_ack": Option(
        (bool,),
        False,
        "consumers auto-ack (at-most-once, no basic.qos effect)",
        feature="at_most_once",
        needs=(True,),
    ),
    "heartbeat": Option(
        (int,), 60, "AMQP heartbeat in seconds (0 = off)", minimum=0, maximum=65535
    ),
    "mandatory": Option(
        (bool,),
        False,
        "RPC sends are mandatory: no queue bound -> Undeliverable (needs confirm)",
        feature="mandatory",
        needs=(True,),
    ),
}


def check_combinations(opts: Mapping[str, Any]) -> None:
    """Refuse option values that are fine alone but not together."""
    prefetch = opts["prefetch"]
    multi_ack = opts["multi_ack"]
    if opts["no_ack"] and multi_ack != 1:
        raise OptionConflict(
            "multi_ack", "has no effect with no_ack=true (nothing is acked): leave it at 1"
        )
    if not opts["no_ack"] and prefetch and multi_ack > prefetch:
        # the broker stops delivering at `prefetch` unacked messages, so a batch
        # larger than that could only ever be completed by the idle timer
        raise OptionConflict(
            "multi_ack",
            f"{multi_ack} exceeds prefetch={prefetch}: the broker would stall every batch; "
            f"use multi_ack <= prefetch",
        )
    if opts["mandatory"] and not opts["confirm"]:
        # aiormq matches a basic.return to its publish only through the confirm
        # bookkeeping; without confirms a return would be dropped and logged
        raise OptionConflict(
            "mandatory", "needs confirm=true (aiormq reports returns through confirms)"
        )
