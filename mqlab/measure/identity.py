"""A step's identity: everything that defines what was measured, so that only true
repeats are merged and only the same step is compared.

A scenario's name is the user's label, not its definition: two unnamed cast
scenarios (both called "cast") that differ in envelope, durability, queue type,
servers, targets or fanout are two steps. The identity is the driver, the load
and every setting of the scenario (the record's ``settings``, written since
results carry it; older records give what they have: the fields below). Two
scenarios defined identically twice in one profile are told apart by their
occurrence, so neither is merged into the other nor dropped from a comparison.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

#: the record's own fields that define a step (the repeat number does not)
FIELDS = (
    "driver", "plugin", "scenario", "pattern", "concurrency", "rate", "message_size",
    "serializer", "envelope", "durable", "queue_type", "servers", "targets", "groups",
    "timeout_s", "roles",
)  # fmt: skip
#: the scenario's fields that are not part of its definition
_NOT_SETTINGS = {"name", "drivers", "concurrency", "rate"}


def settings_of(scenario: Any, queue_type: str, drivers: dict[str, str]) -> dict[str, Any]:
    """A scenario's whole definition (a profile's frozen dataclass), with the step's queue
    type and its other drivers (mixed, rolling), as the results record stores it."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(scenario):
        if f.name in _NOT_SETTINGS:
            continue
        value = getattr(scenario, f.name)
        if f.name == "message_size":
            value = value.text
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        elif isinstance(value, tuple):
            value = [
                dataclasses.asdict(v) if dataclasses.is_dataclass(v) and not isinstance(v, type)
                else v
                for v in value
            ]  # fmt: skip
        out[f.name] = value
    out["queue_type"] = queue_type
    out.update(drivers)
    plain: dict[str, Any] = json.loads(json.dumps(out, default=str))  # as read back
    return plain


def of(record: dict[str, Any], ignore: tuple[str, ...] = ()) -> str:
    """A record's identity (a step's or an aggregate's), as one comparable string;
    ``ignore``: fields left out (``("driver", "plugin")``: the same step of any driver)."""
    found = {k: record.get(k) for k in FIELDS if k not in ignore}
    found["settings"] = record.get("settings")
    return json.dumps(found, sort_keys=True, default=str)


def keys(records: Sequence[dict[str, Any]], ignore: tuple[str, ...] = ()) -> list[tuple[str, int]]:
    """``(identity, occurrence)`` per record: the n-th step of one identity and repeat
    number is occurrence n (a scenario written twice is two steps, never one). With
    ``ignore``, the identity leaves those fields out, the occurrence still counts whole
    identities (the same scenario of two drivers is occurrence 0 of each)."""
    seen: dict[tuple[str, Any], int] = {}
    out = []
    for r in records:
        whole = of(r)
        n = seen.get((whole, r.get("repeat")), 0)
        seen[(whole, r.get("repeat"))] = n + 1
        out.append((of(r, ignore) if ignore else whole, n))
    return out


def differences(records: Sequence[dict[str, Any]]) -> list[str]:
    """For records that share a label: per record, the settings that tell it from the
    others (``envelope=False``), empty when nothing differs."""
    flat = [
        {**{k: r.get(k) for k in FIELDS}, **(r.get("settings") or {})} for r in records
    ]  # fmt: skip
    names = sorted({k for f in flat for k in f})
    differ = [k for k in names if len({json.dumps(f.get(k), default=str) for f in flat}) > 1]
    return [", ".join(f"{k}={f.get(k)}" for k in differ) for f in flat]
