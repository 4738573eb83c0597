"""mqlab's build: pyproject.toml says everything but the compiled hot modules, which are here.

The per-message modules (mqlab/native.py lists them) are compiled with mypyc when the build
can: ``MQLAB_COMPILE=1`` compiles or fails, ``MQLAB_COMPILE=0`` never compiles, and unset it
compiles when a C compiler and Python's headers are found, and falls back to the pure
package when compiling fails. Either way the sources ship and run where the compiled modules
cannot (mqlab/native.py decides at import, and the results file says which path ran).
mypy (for mypyc) is a build requirement only when compiling.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("_mqlab_native", ROOT / "mqlab" / "native.py")
assert _spec is not None and _spec.loader is not None
native = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(native)

WANTED = os.environ.get("MQLAB_COMPILE", "").strip()
if WANTED not in ("", "0", "1"):
    sys.exit(f"MQLAB_COMPILE must be 0, 1 or unset, not {WANTED!r}")


def _say(line: str) -> None:
    print(f"mqlab build: {line}", file=sys.stderr)


def _can_compile() -> str:
    """Why this machine cannot compile the hot modules, or "" when it can."""
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc})"
    include = sysconfig.get_paths()["include"]
    if not Path(include, "Python.h").exists():
        return f"no Python headers ({include}/Python.h; python3-dev)"
    return ""


class _OptionalBuildExt(build_ext):
    """Unless MQLAB_COMPILE=1, a compiler failure leaves the pure package: the compiled
    files of a half-built group are removed, so none of them is half-used."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # any compiler failure means: pure
            if WANTED == "1":
                raise
            _say(f"compiling failed ({exc}); building the pure package")
            for ext in self.extensions:
                for path in (self.get_ext_fullpath(ext.name), self._inplace_path(ext.name)):
                    Path(path).unlink(missing_ok=True)
            (ROOT / "mqlab" / native.RECORD).unlink(missing_ok=True)

    def _inplace_path(self, name: str) -> str:
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        return str(ROOT.joinpath(*name.split(".")).with_suffix("")) + suffix


def _extensions() -> list[Any]:
    record = ROOT / "mqlab" / native.RECORD
    record.unlink(missing_ok=True)  # a pure build leaves no claim to a compiled one
    if WANTED == "0":
        return []
    why = _can_compile()
    if why:
        if WANTED == "1":
            sys.exit(f"MQLAB_COMPILE=1, but {why}")
        _say(f"{why}: building the pure package")
        return []
    try:
        from mypy.version import __version__ as mypy_version
        from mypyc.build import mypycify
    except ImportError:
        if "egg_info" in sys.argv[1:]:
            return []  # asked for the build's requirements only: mypy comes with them
        if WANTED == "1":
            sys.exit("MQLAB_COMPILE=1, but mypyc (mypy) is not installed where this builds")
        _say("no mypyc where this builds: building the pure package")
        return []
    paths = [str(native.source(m, ROOT / "mqlab").relative_to(ROOT)) for m in native.HOT]
    # an isolated build has none of mqlab's libraries installed: what they are is not
    # needed to compile mqlab's own code (calls into them stay Python calls)
    options = ["--ignore-missing-imports"]
    try:
        extensions = mypycify([*options, *paths], group_name=native.GROUP, opt_level="3")
    except (Exception, SystemExit) as exc:  # mypyc's own refusal means: pure
        if WANTED == "1":
            raise
        _say(f"mypyc could not compile the hot modules ({exc}); building the pure package")
        return []
    sources = {m: native.digest(native.source(m, ROOT / "mqlab")) for m in native.HOT}
    record.write_text(json.dumps({"compiler": f"mypyc {mypy_version}", "sources": sources}))
    return extensions


setup(
    ext_modules=_extensions(),
    cmdclass={"build_ext": _OptionalBuildExt},
    # compiling needs mypyc, and only then: a pure build asks for nothing more
    setup_requires=[] if WANTED == "0" or _can_compile() else ["mypy>=1.10"],
)
