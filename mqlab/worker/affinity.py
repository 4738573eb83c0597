"""Processes pinned to CPUs, and the CPUs each really had, read back from the kernel.

Pinning sets the mask of every thread of a process, and with :func:`pin_tree` of
its children too (``sched_setaffinity`` acts on one thread; the Erlang VM has
dozens). What each process had is read back for the results whatever was asked:
a pin that did not hold shows there.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import psutil

__all__ = ["affinity", "pin", "pin_tree", "readback"]


def _threads(pid: int) -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return [pid]


def pin(pid: int, cpus: tuple[int, ...]) -> None:
    """Every thread of ``pid`` on ``cpus``; a process that is gone is left alone."""
    for tid in _threads(pid):
        try:
            os.sched_setaffinity(tid, cpus)
        except (ProcessLookupError, PermissionError):
            continue  # a thread that ended meanwhile; one we may not touch shows in the readback


def pin_tree(pid: int, cpus: tuple[int, ...]) -> None:
    """``pid`` and all its descendants (a node's erl_child_setup, inet_gethost) on ``cpus``."""
    try:
        kids = [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        kids = []
    for p in (pid, *kids):
        pin(p, cpus)


def affinity(pid: int) -> dict[str, Any] | None:
    """The CPUs ``pid``'s threads may run on, as the kernel has them now; None if gone.

    ``cpus`` is the union over its threads; ``mixed`` says that threads differ (a pin
    that reached only some of them).
    """
    masks = []
    for tid in _threads(pid):
        try:
            masks.append(frozenset(os.sched_getaffinity(tid)))
        except (ProcessLookupError, PermissionError):
            continue
    if not masks:
        return None
    union = sorted(set().union(*masks))
    out: dict[str, Any] = {"cpus": union, "threads": len(masks)}
    if len(set(masks)) > 1:
        out["mixed"] = True
    return out


def readback(
    workers: Iterable[tuple[str, str, int | None]], broker_pids: Iterable[int]
) -> list[dict[str, Any]]:
    """The affinity each process of a step really had: (name, role, pid) of every worker,
    then every broker process (a node's children included), read from the kernel now."""
    out: list[dict[str, Any]] = []
    for name, role, pid in workers:
        got = affinity(pid) if pid is not None else None
        out.append({"process": name, "role": role, "pid": pid, **(got or {"cpus": None})})
    for pid in broker_pids:
        try:
            tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            continue
        for p in tree:
            got = affinity(p.pid)
            if got is None:
                continue
            try:
                name = p.name()
            except psutil.Error:
                name = "?"
            out.append({"process": name, "role": "broker", "pid": p.pid, **got})
    return out
