"""The results file: one JSON document per run, rewritten after every step.

Written atomically (temporary file, then rename) after each step, so a crash
or a Ctrl-C never loses a finished step. Every field is documented in
``docs/results.md``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from mqlab.aggregate import aggregate

SCHEMA = 2


class ResultsFile:
    def __init__(self, path: Path, profile: dict[str, Any], environment: dict[str, Any]) -> None:
        self.path = path
        self.doc: dict[str, Any] = {
            "schema": SCHEMA,
            "profile": profile,
            "environment": environment,
            "status": "running",
            "steps": [],
        }

    def add_step(self, record: dict[str, Any]) -> None:
        self.doc["steps"].append(record)
        aggregates = aggregate(self.doc["steps"])
        if aggregates:
            self.doc["aggregates"] = aggregates
        self.write()

    def finish(self, status: str, message: str = "") -> None:
        self.doc["status"] = status
        if message:
            self.doc["message"] = message
        self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".results-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self.doc, f, indent=1)
                f.write("\n")
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def load_results(path: str | Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        doc: dict[str, Any] = json.load(f)
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: unsupported results schema {doc.get('schema')!r}")
    return doc
