"""The figure tables of docs/ rebuilt from the stored runs (``docs/runs/*.json.gz``).

    .venv/bin/python scripts/figures.py            # check: a diff and exit 1 if a page differs
    .venv/bin/python scripts/figures.py --write    # rewrite every table from its run

A table is a block of a Markdown page between two comments; the first names the command
that prints it, run from the repository's root::

    <!-- figures: mqlab show docs/runs/quickstart-sample.json.gz --markdown -->

    (what that command prints)

    <!-- /figures -->

Only ``mqlab show RUN --markdown`` (``--top`` or ``--table TABLE`` too: the tables in a
profile's own shape, :mod:`mqlab.live.pagetables`; ``--table spread`` over several runs,
named by a glob as a shell expands it) and ``mqlab compare A B --markdown`` run,
and every file they read is a stored run under ``docs/runs/``: a page cannot quote a figure
its run does not hold, and a re-measured run changes every table that quotes it.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = "docs/runs/"
PAGES = ("README.md", "docs/*.md", "docs/runs/*.md")
BLOCK = re.compile(
    r"^<!-- figures: (?P<command>[^\n]*?) -->\n(?P<body>.*?)^<!-- /figures -->", re.S | re.M
)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)  # a block shown in a code example is text
_COMMANDS = {"show": 1, "compare": 2}  # subcommand -> the stored runs it reads
_VALUED = {"--table"}  # options whose next argument is their value


class BlockError(ValueError):
    """A block that names a command this script does not run; one line naming the page."""


def pages() -> Iterator[Path]:
    for pattern in PAGES:
        yield from sorted(ROOT.glob(pattern))


def checked(command: str) -> list[str]:
    """The command's arguments after ``mqlab``, or BlockError naming what is wrong."""
    argv = []
    for a in shlex.split(command):  # a glob expands as a shell would, in name order
        found = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(a)) if "*" in a else [a]
        argv += found or [a]
    if argv[:1] != ["mqlab"] or len(argv) < 2 or argv[1] not in _COMMANDS:
        raise BlockError(f"{command!r}: only `mqlab show` and `mqlab compare` build tables")
    if "--markdown" not in argv:
        raise BlockError(f"{command!r}: give --markdown (a page holds Markdown)")
    # an option's value is not a run: `--table rolling`
    valued = {i + 1 for i, a in enumerate(argv) if a in _VALUED}
    runs = [a for i, a in enumerate(argv) if i >= 2 and i not in valued and not a.startswith("-")]
    spread = argv[1] == "show" and "spread" in argv  # `--table spread` reads several runs
    if not (len(runs) >= 1 if spread else len(runs) == _COMMANDS[argv[1]]) or not all(
        r.startswith(RUNS) and r.endswith(".json.gz") for r in runs
    ):
        raise BlockError(f"{command!r}: read stored runs only ({RUNS}*.json.gz)")
    return argv[1:]


def output(command: str) -> str:
    """What ``command`` prints, run in this process from the repository's root."""
    from mqlab.console.cli import main

    argv = checked(command)
    buf = io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()) as err:
            code = main(argv)
    finally:
        os.chdir(cwd)
    if code != 0:
        raise BlockError(f"{command!r} failed: {err.getvalue().strip()}")
    return buf.getvalue().strip()


def blocks(text: str) -> list[re.Match[str]]:
    """The page's blocks, those inside a code example left out."""
    fences = [m.span() for m in FENCE.finditer(text)]
    return [m for m in BLOCK.finditer(text) if not any(a <= m.start() < b for a, b in fences)]


def rebuilt(text: str) -> str:
    """The page with every block's body replaced by what its command prints now."""
    out, at = [], 0
    for m in blocks(text):
        body = output(m["command"])
        out += [text[at : m.start()], f"<!-- figures: {m['command']} -->\n\n{body}\n\n"]
        out.append("<!-- /figures -->")
        at = m.end()
    return "".join(out) + text[at:]


def main(argv: list[str]) -> int:
    write = "--write" in argv
    differs = 0
    for page in pages():
        text = page.read_text()
        if not blocks(text):
            continue
        try:
            new = rebuilt(text)
        except BlockError as exc:
            print(f"{page.relative_to(ROOT)}: {exc}", file=sys.stderr)
            return 2
        if new == text:
            continue
        differs += 1
        name = str(page.relative_to(ROOT))
        if write:
            page.write_text(new)
            print(f"rewrote {name}")
        else:
            sys.stdout.writelines(
                difflib.unified_diff(
                    text.splitlines(keepends=True),
                    new.splitlines(keepends=True),
                    f"{name} (the page)",
                    f"{name} (from its runs)",
                )
            )
    if differs and not write:
        print(f"{differs} page(s) differ from their runs: scripts/figures.py --write rebuilds them")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
