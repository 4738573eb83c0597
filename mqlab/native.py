"""The harness's hot modules: compiled by mypyc where the build could, pure Python otherwise.

The per-message path (encoding, the loopback, the ledger, the recorder, the senders) is
what mqlab spends on every message it measures. ``setup.py`` compiles these modules with
mypyc when it finds a C compiler (``MQLAB_COMPILE=0`` never, ``=1`` always), beside their
sources, and writes :data:`RECORD`: the compiler and a hash of each source it compiled.
The sources stay, and are the fallback: a build without a compiler, or a compiled module
older than its source (a checkout edited after the build), runs them; so does any process
started with ``MQLAB_PURE=1`` (to compare the two paths on one installation).

:func:`guard` decides once per process, before any hot module is imported (mqlab's
``__init__`` calls it): every hot module compiled from the source beside it, or all of them
pure (compiled modules call each other's classes directly, so they cannot be mixed).
:func:`status` says which path runs, for the results file's environment.

This module imports nothing of mqlab: ``setup.py`` reads it by path, before mqlab is built.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any, Final, TypeVar

_T = TypeVar("_T")

try:
    # what mypyc reads from a hot class (``allow_interpreted_subclasses``: a class that
    # users and tests subclass); mypy brings it where the modules are compiled
    from mypy_extensions import mypyc_attr as mypyc_attr
except ImportError:  # the pure package needs no mypy: the decorator then does nothing

    def mypyc_attr(*attrs: str, **kwattrs: object) -> Callable[[_T], _T]:
        return lambda cls: cls


#: the modules on the per-message path, compiled together
HOT: Final = (
    "mqlab.codec",
    "mqlab.loopback",
    "mqlab.measure.ledger",
    "mqlab.worker.recorder",
    "mqlab.worker.workload",
)
#: mypyc's group: its shared library is the module ``mqlab.native_hot__mypyc``
GROUP: Final = "mqlab.native_hot"
#: written by the build beside this module: {"compiler": ..., "sources": {module: sha256}}
RECORD: Final = "native.json"

_PACKAGE = Path(__file__).resolve().parent


def source(module: str, package: Path = _PACKAGE) -> Path:
    """The ``.py`` file of a hot module, under the package directory ``package``."""
    return package.joinpath(*module.split(".")[1:]).with_suffix(".py")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _compiled_file(module: str) -> Path | None:
    stem = _PACKAGE.joinpath(*module.split(".")[1:])
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        found = stem.with_name(stem.name + suffix)
        if found.exists():
            return found
    return None


def _decide() -> tuple[str, str]:
    """("compiled", the compiler) or ("pure", why): from the files, nothing imported."""
    if os.environ.get("MQLAB_PURE", "") not in ("", "0"):
        return "pure", "MQLAB_PURE is set: the pure modules run"
    built = [m for m in (*HOT, GROUP + "__mypyc") if _compiled_file(m) is not None]
    if not built:
        return "pure", "not compiled (built without a C compiler, or MQLAB_COMPILE=0)"
    if len(built) <= len(HOT):
        return "pure", "the compiled build is incomplete: the pure modules run"
    try:
        record = json.loads((_PACKAGE / RECORD).read_text())
        sources: dict[str, str] = record["sources"]
        compiler = str(record["compiler"])
    except (OSError, ValueError, KeyError, TypeError):
        return "pure", f"the compiled build has no readable {RECORD}: the pure modules run"
    changed = [m for m in HOT if sources.get(m) != digest(source(m))]
    if changed:
        names = ", ".join(str(source(m).relative_to(_PACKAGE.parent)) for m in changed)
        return "pure", f"changed since the compiled build ({names}): the pure modules run"
    return "compiled", compiler


class _PureFinder(MetaPathFinder):
    """Finds the hot modules' sources, ahead of the compiled files beside them."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in HOT:
            return None
        return importlib.util.spec_from_file_location(fullname, source(fullname))


_decision: tuple[str, str] | None = None


def guard() -> None:
    """Decide this process's path once; the pure one is taken from the sources."""
    global _decision
    if _decision is not None:
        return
    _decision = _decide()
    if _decision[0] == "pure" and any(_compiled_file(m) for m in HOT):
        sys.meta_path.insert(0, _PureFinder())


def status() -> dict[str, Any]:
    """Which path the hot modules run in this process, from the modules themselves:
    ``{"path": "compiled", "compiler": ...}`` or ``{"path": "pure", "why": ...}``."""
    guard()
    assert _decision is not None
    loaded = [importlib.import_module(m) for m in HOT]
    compiled = [m.__name__ for m in loaded if not str(m.__file__).endswith(".py")]
    if len(compiled) == len(HOT):
        return {"path": "compiled", "compiler": _decision[1], "modules": list(HOT)}
    if compiled:  # the guard makes this impossible; say so if it ever is not
        return {"path": "mixed", "compiled": compiled, "why": _decision[1]}
    if _decision[0] == "compiled":  # imported from elsewhere before mqlab was (a script's path)
        return {"path": "pure", "why": "the hot modules were imported from their sources"}
    return {"path": "pure", "why": _decision[1]}
