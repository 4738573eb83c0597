"""A checked results file as one typed run: its steps and aggregates as the record types.

Built only from a document :mod:`mqlab.results.read` has checked field by field (and,
for an older schema, brought to today's form), so every value has its declared type
and range. A key that is missing means "not measured", and is kept as ``None`` or an
empty tuple, never replaced by an invented figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mqlab.record.step import Aggregate, StepRecord
from mqlab.record.trust import Fact
from mqlab.record.wire import from_wire

__all__ = ["Run", "run_from"]


@dataclass(frozen=True)
class Run:
    path: Path
    schema: int
    status: str
    message: str
    name: str
    duration_s: float | None
    run_settings: Mapping[str, Any]  # the profile's [run] table as the run used it
    broker_urls: tuple[str, ...]  # masked by `mqlab run` before they were written
    environment: Mapping[str, Any]
    steps: tuple[StepRecord, ...]
    aggregates: tuple[Aggregate, ...] = ()

    @property
    def system(self) -> tuple[Fact, ...] | None:
        """The machine's facts as the run began (``mqlab system``); None in an older file."""
        facts = self.environment.get("system")
        if not isinstance(facts, list):
            return None
        return tuple(from_wire(Fact, f) for f in facts if isinstance(f, dict))

    def off(self) -> tuple[Fact, ...]:
        """The facts that were off (they move figures), the heaviest processes' names aside:
        their share is the other processes' fact."""
        return tuple(f for f in self.system or () if f.off and f.what != "heavy processes")


def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def run_from(path: Path, doc: dict[str, Any]) -> Run:
    """The typed run of a document :func:`mqlab.results.read.validate` has checked."""
    run = _d(_d(doc.get("profile")).get("run"))
    duration = run.get("duration")
    return Run(
        path=path,
        schema=int(doc["schema"]),
        status=str(doc.get("status", "?")),
        message=str(doc.get("message") or ""),
        name=str(run.get("name", path.stem)),
        duration_s=float(duration) if isinstance(duration, int | float) else None,
        run_settings=run,
        broker_urls=tuple(str(u) for u in _d(_d(doc.get("profile")).get("broker")).get("urls", ())),
        environment=_d(doc.get("environment")),
        steps=tuple(from_wire(StepRecord, s) for s in doc["steps"]),
        aggregates=tuple(from_wire(Aggregate, a) for a in doc.get("aggregates") or ()),
    )
