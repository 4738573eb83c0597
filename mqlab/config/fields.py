"""Reading a profile's TOML tables field by field, each refusal one line naming the field."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from mqlab.config import limits
from mqlab.config.limits import parse_duration
from mqlab.errors import ProfileError


class FieldReader:
    """Typed access to one TOML table of a profile; every error names the file and the
    field path (``scenario[2].rate``) and says what was expected."""

    def __init__(self, path: str, where: str, table: object, allowed: set[str]) -> None:
        self.path = path
        self.where = where
        if not isinstance(table, dict):
            raise ProfileError(path, where, f"expected a table, got {type(table).__name__}")
        self.table: dict[str, Any] = table
        unknown = sorted(set(table) - allowed)
        if unknown:
            raise ProfileError(
                path,
                self.field(unknown[0]),
                f"unknown key (expected one of: {', '.join(sorted(allowed))})",
            )

    def field(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail(self, key: str, problem: str) -> ProfileError:
        return ProfileError(self.path, self.field(key), problem)

    def get(self, key: str, types: tuple[type, ...], default: Any, what: str) -> Any:
        if key not in self.table:
            return default
        value = self.table[key]
        if isinstance(value, bool) and bool not in types:
            raise self.fail(key, f"expected {what}, got {value!r}")
        if not isinstance(value, types):
            raise self.fail(key, f"expected {what}, got {value!r}")
        return value

    def string(self, key: str, default: str) -> str:
        value = self.get(key, (str,), default, "a string")
        if not value:
            raise self.fail(key, "expected a non-empty string")
        return str(value)

    def checked(self, key: str, value: Any, check: Callable[[Any], Any]) -> Any:
        """``check(value)``, its ValueError turned into this field's ProfileError."""
        try:
            return check(value)
        except ValueError as exc:
            raise self.fail(key, str(exc)) from None

    def name(self, key: str, default: str) -> str:
        """A name shown in tables and file names (see :func:`mqlab.config.limits.name`)."""
        return str(self.checked(key, self.string(key, default), lambda v: limits.name(v, key)))

    def topic(self, key: str, default: str) -> str:
        """An exchange or topic name a broker will be given."""
        return str(self.checked(key, self.string(key, default), lambda v: limits.topic(v, key)))

    def boolean(self, key: str, default: bool) -> bool:
        return bool(self.get(key, (bool,), default, "true or false"))

    def count(self, key: str, default: int, minimum: int, maximum: int) -> int:
        value = self.get(key, (int,), default, f"a whole number >= {minimum}")
        if value < minimum:
            raise self.fail(key, f"expected a whole number >= {minimum}, got {value}")
        self.checked(key, value, lambda v: limits.at_most(v, maximum, key))
        return int(value)

    def duration(self, key: str, default: float, maximum: float = limits.MAX_DURATION_S) -> float:
        """A finite duration, 0 .. ``maximum`` seconds (see :func:`parse_duration`)."""
        if key not in self.table:
            return default
        seconds = float(self.checked(key, self.table[key], parse_duration))
        self.checked(key, seconds, lambda v: limits.at_most(v, maximum, f"{key} (s)"))
        return seconds

    def levels(self, key: str, number: type, minimum: float, maximum: float) -> tuple[Any, ...]:
        """One finite number or a list of them (one step each), minimum .. maximum."""
        if key not in self.table:
            return ()
        raw = self.table[key]
        values = raw if isinstance(raw, list) else [raw]
        kinds = (int,) if number is int else (int, float)
        what = "whole numbers" if number is int else "finite numbers"
        out = []
        for v in values:
            ok = not isinstance(v, bool) and isinstance(v, kinds) and math.isfinite(v)
            if not ok or v < minimum:
                shown = repr(v)[:40]
                raise self.fail(key, f"expected {what} >= {minimum:g} (or a list of them), "
                                f"got {shown}")  # fmt: skip
            self.checked(key, v, lambda x: limits.at_most(x, maximum, key))
            out.append(number(v))
        if not out:
            raise self.fail(key, "expected at least one value")
        self.checked(key, len(out), lambda n: limits.at_most(n, limits.MAX_LEVELS, "values"))
        return tuple(out)

    def urls(self, key: str, default: object = None) -> tuple[str, ...]:
        """One URL or a list of them (a cluster), each checked by ``limits.url``."""
        raw = self.table.get(key, default)
        urls = [raw] if isinstance(raw, str) else raw
        if not isinstance(urls, list) or not urls or not all(isinstance(u, str) for u in urls):
            raise self.fail(key, "expected a URL string or a list of URL strings")
        self.checked(key, len(urls), lambda n: limits.at_most(n, limits.MAX_SERVERS, "URLs"))
        return tuple(self.checked(key, u, limits.url) for u in urls)
