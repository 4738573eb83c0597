"""A step's identity: everything that defines what was measured, so that only true
repeats are merged and only the same step is compared.

A scenario's name is the user's label, not its definition: two unnamed cast
scenarios (both called "cast") that differ in envelope, durability, queue type,
servers, targets or fanout are two steps, and so are two runs of one driver with
different options (``queue_size = 1`` and the default). The identity is the step's
:class:`~mqlab.record.figures.Cell`: the driver and its options, the load and every
setting of the scenario (older records give what they have). Two scenarios defined
identically twice in one profile are told apart by their occurrence, so neither is
merged into the other nor dropped from a comparison.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Sequence
from typing import Any, Protocol

from mqlab.record.figures import Cell
from mqlab.record.wire import to_wire

#: the scenario's fields that are not part of its definition
_NOT_SETTINGS = {"name", "drivers", "concurrency", "rate"}
#: the cell's fields that say what it offered, not what it is (a chart's line spans them)
LOAD = ("concurrency", "rate")


class HasCell(Protocol):
    @property
    def cell(self) -> Cell: ...


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


def _settings(settings: Any, ignore: Collection[str]) -> Any:
    """The settings map less the ``settings.<key>`` entries of ``ignore``."""
    if not isinstance(settings, dict):
        return settings
    return {k: v for k, v in settings.items() if f"settings.{k}" not in ignore}


def _fields(cell: Cell, ignore: Collection[str]) -> dict[str, Any]:
    out = {k: v for k, v in to_wire(cell).items() if k not in ignore}
    if "settings" in out:
        out["settings"] = _settings(out["settings"], ignore)
    return out


def of(record: HasCell, ignore: Collection[str] = ()) -> str:
    """A record's identity (a step's or an aggregate's), as one comparable string;
    ``ignore``: fields left out (``("driver", "plugin", "options")``: the same step of
    any driver; ``settings.<key>``: one of the scenario's settings)."""
    return json.dumps(_fields(record.cell, ignore), sort_keys=True, default=str)


def unrecorded(records: Sequence[HasCell]) -> set[str]:
    """The cell's fields no record of a run holds (an older file's): a comparison with
    another run leaves them out of both sides' identities."""
    names = [f.name for f in dataclasses.fields(Cell)]
    return {n for n in names if all(getattr(r.cell, n) is None for r in records)} - {
        *LOAD,
        "roles",
    }


def unshared_settings(a: Sequence[HasCell], b: Sequence[HasCell]) -> set[str]:
    """``settings.<key>`` for each scenario setting one run's records hold and the other's
    never do (a file written before the setting existed): a comparison leaves it out of both
    sides' identities, as it does a field no record holds."""

    def held(records: Sequence[HasCell]) -> set[str]:
        return {k for r in records for k in (r.cell.settings or {})}

    ka, kb = held(a), held(b)
    return {f"settings.{k}" for k in ka ^ kb} if ka and kb else set()


def keys(records: Sequence[HasCell], ignore: Collection[str] = ()) -> list[tuple[str, int]]:
    """``(identity, occurrence)`` per record: the n-th step of one identity and repeat
    number is occurrence n (a scenario written twice is two steps, never one). With
    ``ignore``, the identity leaves those fields out, the occurrence still counts whole
    identities (the same scenario of two drivers is occurrence 0 of each)."""
    seen: dict[tuple[str, Any], int] = {}
    out = []
    for r in records:
        whole = of(r)
        repeat = getattr(r, "repeat", None)
        n = seen.get((whole, repeat), 0)
        seen[(whole, repeat)] = n + 1
        out.append((of(r, ignore) if ignore else whole, n))
    return out


def differences(records: Sequence[HasCell], ignore: Collection[str] = ()) -> list[str]:
    """For records that share a label: per record, the settings and options that tell it
    from the others (``envelope=False``, ``queue_size=1``), empty when nothing differs."""
    flat = [
        {**_fields(r.cell, {"settings", "options", *ignore}),
         **_settings(dict(r.cell.settings or {}), ignore), **(r.cell.options or {})}
        for r in records
    ]  # fmt: skip
    names = sorted({k for f in flat for k in f})
    differ = [k for k in names if len({json.dumps(f.get(k), default=str) for f in flat}) > 1]
    return [", ".join(f"{k}={f.get(k)}" for k in differ) for f in flat]


#: what a cell of drivers side by side leaves out: who measured it
WHO = ("driver", "plugin", "options")


def told_apart(records: Sequence[HasCell], label: Any, ignore: Collection[str] = LOAD) -> list[str]:
    """Per record, what tells it from the records whose ``label(record)`` is the same but
    whose definitions (less ``ignore``: what the label spans, the load of a line, the drivers
    of a cell) are not (``envelope=False``); "" when nothing does."""
    by_label: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        by_label.setdefault(str(label(r)), []).append(i)
    out = [""] * len(records)
    for same in by_label.values():
        firsts: dict[str, int] = {}  # one per identity: repeats are not "different"
        for i in same:
            firsts.setdefault(of(records[i], ignore), i)
        if len(firsts) < 2:
            continue
        order = list(firsts.values())
        said = dict(zip(order, differences([records[i] for i in order], ignore), strict=True))
        for j in same:
            out[j] = said[firsts[of(records[j], ignore)]]
    return out


def names(records: Sequence[HasCell], label: Any, ignore: Collection[str] = LOAD) -> list[str]:
    """Each record's ``label(record)``, with what tells it apart (:func:`told_apart`):
    ``cast c=10 [envelope=False]``."""
    return [
        f"{label(r)} [{diff}]" if diff else str(label(r))
        for r, diff in zip(records, told_apart(records, label, ignore), strict=True)
    ]
