"""The results file: one JSON document per run, rewritten after every step.

Written atomically (temporary file, then rename) after each step, so a crash,
a Ctrl-C or a full disk never loses a finished step: a write that fails leaves
the last good file in place, is reported in one line, and the run goes on. The
file is strict JSON: a figure that is not a finite number is written as
``null``. Every field is documented in ``docs/results.md``; :mod:`mqlab.results.read`
is its one reader.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mqlab.record.repeats import aggregate
from mqlab.record.step import StepRecord
from mqlab.record.wire import SCHEMA
from mqlab.results import paths

__all__ = ["SCHEMA", "ResultsFile", "strict"]


def strict(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None (JSON's ``null``)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict(v) for v in value]
    return value


class ResultsFile:
    def __init__(
        self,
        path: Path,
        profile: dict[str, Any],
        environment: dict[str, Any],
        on_write_error: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.path = path
        self.on_write_error = on_write_error
        #: the last write's failure, or None once a write succeeds
        self.write_error: str | None = None
        #: the finished steps, as the runner handed them
        self.steps: list[StepRecord] = []
        self.doc: dict[str, Any] = {
            "schema": SCHEMA,
            "profile": profile,
            "environment": environment,
            "status": "running",
            "steps": [],
        }

    def add_step(self, record: StepRecord) -> None:
        self.steps.append(record)
        self.doc["steps"].append(record.to_wire())
        aggregates = aggregate(self.steps)
        if aggregates:
            self.doc["aggregates"] = [a.to_wire() for a in aggregates]
        self.write()

    def finish(self, status: str, message: str = "") -> None:
        self.doc["status"] = status
        if message:
            self.doc["message"] = message
        self.write()

    def write(self) -> bool:
        """Replace the file with the document; False (reported once) if the disk refused."""
        text = json.dumps(strict(self.doc), indent=1, allow_nan=False) + "\n"
        try:
            paths.replace_atomically(self.path, text, ".results-")
        except OSError as exc:
            problem = f"cannot write the results file {self.path}: {exc.strerror or exc}"
            if problem != self.write_error:
                self.on_write_error(f"mqlab: {problem}; the last good copy is kept")
            self.write_error = problem
            return False
        self.write_error = None
        return True
