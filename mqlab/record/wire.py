"""A record type's one declaration, read three ways: its shape, its JSON form, and back.

Every field of a record type (a frozen dataclass) is declared with :func:`key`: its
shape (:mod:`mqlab.record.shape`), from which schema on the results file must hold it,
whether a None is left out of the file, and whether it is a *flat* section (its own
fields sit in its parent's map, as a later stage's keys sit beside the step's). From
that one declaration:

- :func:`shape_of` is the reader's check for a schema (a nested type is checked as its
  own record; its nullness is the field type's ``| None``);
- :func:`to_wire` is the results file's JSON form;
- :func:`from_wire` reads a checked map back into the type.

So a key is declared once: a field added to a section is written, checked and read.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, TypeVar

from mqlab.record.shape import MAX_ENTRIES, Free, Record, Seq, Spec, Table

__all__ = ["SCHEMA", "from_wire", "key", "shape_of", "to_wire"]

#: the results file's schema this mqlab writes (3: the step record declared by its types)
SCHEMA = 3

T = TypeVar("T")


def key(
    spec: Spec | None = None,
    *,
    since: int = 0,
    omit: bool = False,
    flat: bool = False,
    max: int = MAX_ENTRIES,
    default: Any = dataclasses.MISSING,
    factory: Any = dataclasses.MISSING,
    wire: str = "",
) -> Any:
    """A record field: ``spec`` its shape (None: a nested record type's own), required in
    every file from schema ``since`` on (0: never; 1: always, and so without a default),
    left out of the file when None (``omit``),
    or a ``flat`` section whose fields sit in the parent's map; ``max`` bounds a list or map
    of nested records; ``wire`` names its key when the field's own name cannot."""
    meta = {"spec": spec, "since": since, "omit": omit, "flat": flat, "max": max, "wire": wire}
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata=meta)
    if default is dataclasses.MISSING and since != 1 and not flat:
        default = None  # absent from an older file: not measured
    if isinstance(default, list | dict | set):
        raise TypeError("a record's default is immutable: give a tuple or None")
    return dataclasses.field(default=default, metadata=meta)


def _fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(cls)


@cache
def _hints_of(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _hints(cls: type) -> dict[str, Any]:
    return _hints_of(cls)


def _optional(tp: Any) -> tuple[Any, bool]:
    """(the type without None, whether None was allowed)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(tp))
        return (args[0] if len(args) == 1 else typing.Union[tuple(args)]), nullable  # noqa: UP007
    return tp, False


def _nullable(spec: Spec, null: bool) -> Spec:
    return dataclasses.replace(spec, null=True) if null and not spec.null else spec


def _derived(tp: Any, schema: int, max_: int) -> Spec:
    """The shape of a nested record type, a tuple of them or a map of them."""
    inner, null = _optional(tp)
    origin = typing.get_origin(inner)
    if isinstance(inner, type) and dataclasses.is_dataclass(inner):
        return _nullable(shape_of(inner, schema), null)
    if origin is tuple:
        return Seq(_derived(typing.get_args(inner)[0], schema, max_), max_, null)
    if origin in (Mapping, dict):
        return Table(_derived(typing.get_args(inner)[1], schema, max_), max_, null)
    raise TypeError(f"{tp!r}: a record field needs a shape (key(spec))")


@cache
def shape_of(cls: type, schema: int = SCHEMA) -> Record:
    """The reader's check of ``cls`` in a file of ``schema``: every declared key, the ones
    required from that schema on, and flat sections' keys in place."""
    specs: dict[str, Spec] = {}
    required: list[str] = []
    one_of: tuple[str, ...] = getattr(cls, "ONE_OF", ())
    hints = _hints(cls)
    for f in _fields(cls):
        m = f.metadata
        if m.get("flat"):
            sub = shape_of(_optional(hints[f.name])[0], schema)
            specs.update(sub.fields)
            required += sub.required
            one_of = one_of or sub.one_of
            continue
        name = m.get("wire") or f.name
        null = _optional(hints[f.name])[1]
        spec = m.get("spec")
        specs[name] = (
            _nullable(spec, null) if spec is not None else _derived(hints[f.name], schema, m["max"])
        )
        if m.get("since") and schema >= m["since"]:
            required.append(name)
    return Record(specs, tuple(required), one_of=one_of)


def to_wire(value: Any) -> dict[str, Any]:
    """A record as the results file holds it: JSON's maps and lists, in field order."""
    out: dict[str, Any] = {}
    for f in _fields(type(value)):
        v = getattr(value, f.name)
        m = f.metadata
        if m.get("flat"):
            if v is not None:
                out.update(to_wire(v))
        elif not (v is None and m.get("omit")):
            out[m.get("wire") or f.name] = _plain(v)
    return out


def _plain(v: Any) -> Any:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return to_wire(v)
    if isinstance(v, tuple | list):
        return [_plain(x) for x in v]
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    return v


def from_wire(cls: type[T], d: Mapping[str, Any]) -> T:
    """A checked map read into ``cls`` (an absent optional key takes the field's default)."""
    args: dict[str, Any] = {}
    hints = _hints(cls)
    for f in _fields(cls):
        m = f.metadata
        if m.get("flat"):
            args[f.name] = from_wire(_optional(hints[f.name])[0], d)
            continue
        name = m.get("wire") or f.name
        if name in d:
            args[f.name] = _typed(hints[f.name], d[name])
    return cls(**args)


def _typed(tp: Any, v: Any) -> Any:
    if v is None or tp is Any:
        return v
    inner, _ = _optional(tp)
    origin = typing.get_origin(inner)
    if dataclasses.is_dataclass(inner) and isinstance(v, Mapping):
        return from_wire(inner, v)  # type: ignore[arg-type]
    if origin is tuple and isinstance(v, list | tuple):
        item = typing.get_args(inner)[0]
        return tuple(_typed(item, x) for x in v)
    if origin in (Mapping, dict) and isinstance(v, Mapping):
        item = typing.get_args(inner)[1]
        return {k: _typed(item, x) for k, x in v.items()}
    if inner is float and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    return v


def free(null: bool = True) -> Free:
    """Free JSON: a profile's own words (settings, options), kept as they were written."""
    return Free(null)
