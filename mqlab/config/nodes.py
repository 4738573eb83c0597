"""Which node a worker connects to first: ``"node1"``, ``"node2"``, ... or ``"spread"``.

The seed report's topologies put clients on one node and servers on another
("client on slave 1, server on slave 2"). A worker gets every node's URL, its
own node first and the others after in node order, so a driver that fails
over has somewhere to go.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

SPREAD = "spread"
_NODE = re.compile(r"node([1-9]\d*)")


def check_placement(placement: str, nodes: int) -> str | None:
    """None if ``placement`` names one of ``nodes`` nodes or is "spread", else one line why not."""
    if placement == SPREAD:
        return None
    match = _NODE.fullmatch(placement)
    if match is None:
        return f'expected "node1" .. "node{nodes}" or "spread", got {placement!r}'
    if int(match.group(1)) > nodes:
        return f"{placement!r} names a node the cluster does not have (it has {nodes})"
    return None


def worker_urls(urls: Sequence[str], placement: str, worker: int) -> tuple[str, ...]:
    """Worker ``worker``'s (0-based) URL list: its node's URL first, then the others in order.

    ``"nodeK"`` puts node K first for every worker; ``"spread"`` goes round-robin
    (worker 0 on node 1, worker 1 on node 2, ...). Raises ValueError for a
    placement :func:`check_placement` refuses.
    """
    if not urls:
        raise ValueError("no broker URLs to place workers on")
    problem = check_placement(placement, len(urls))
    if problem:
        raise ValueError(problem)
    first = worker % len(urls) if placement == SPREAD else int(placement[4:]) - 1
    return (urls[first], *urls[:first], *urls[first + 1 :])
