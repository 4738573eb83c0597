"""How every command explains itself in ``--help``: one shape, given by construction.

Each command's parser is made through :class:`Parser` (argparse hands the same class to
every subcommand), so each gets the same treatment without asking for it: paragraphs
wrapped to the terminal but examples kept as written, every option's default shown unless
its help already says what it is, and one example in the epilog. The exit codes are
listed once, in ``mqlab --help``. tests/test_cli_help.py walks every parser and checks it.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, NoReturn

from mqlab.console.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK

#: the one naming scheme for what an argument takes: each metavar, and what it stands for
METAVARS = {
    "PROFILE": "a profile (TOML)",
    "RESULTS": "a results file (JSON) that mqlab run wrote",
    "A": "the baseline results file of a comparison",
    "B": "the results file compared with the baseline",
    "FILE": "a file to write",
    "DIR": "a directory",
    "INVENTORY": "a hosts inventory (TOML)",
    "URL": "a broker URL",
    "PORT": "a TCP port",
    "ADDRESS": "an IP address or host name",
    "DURATION": "a duration: 20s, 500ms, 2m or seconds",
    "N": "a whole number",
    "PERCENT": "a percentage",
    "TABLE": "the name of one of mqlab show's tables",
    "CASE": "the name of one of mqlab selftest's known-answer cases",
    "COMMAND": "a subcommand",
    "ACTION": "what to do",
}

#: what mqlab's exit status means, for every command
EXIT_CODES = {
    EXIT_OK: "done",
    EXIT_FAILED: "a run that could not go on (a broker down, a worker that would not start)",
    EXIT_BAD_INPUT: "bad input (a profile, an option, a file): one line, nothing started",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}
#: what every exit status but "bad input" keeps
_KEPT = "After 1 or 130, what was measured before is in the results file."

_EXAMPLE = "example:"


def exit_codes() -> str:
    """The exit statuses as an epilog paragraph, one per line."""
    width = max(len(str(code)) for code in EXIT_CODES)
    lines = (f"  {code:<{width}}  {meaning}" for code, meaning in EXIT_CODES.items())
    return "exit status:\n" + "\n".join(lines) + "\n\n" + _KEPT


def _example(command: str) -> str:
    """The epilog's example, indented so that it is printed as written."""
    return f"{_EXAMPLE}\n  {command}"


def examples(parser: argparse.ArgumentParser) -> list[str]:
    """The example command lines of a parser's epilog (tests and docs read them)."""
    epilog = parser.epilog or ""
    _, found, rest = epilog.partition(_EXAMPLE + "\n")
    if not found:
        return []
    return [line.strip() for line in rest.split("\n\n")[0].splitlines() if line.strip()]


class Formatter(argparse.HelpFormatter):
    """Paragraphs wrapped to the terminal, indented lines (examples, lists) kept as they
    are; each option's default at the end of its help unless the help names it."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for para in text.split("\n\n"):
            lines = para.splitlines()
            if len(lines) > 1 and all(line.startswith("  ") for line in lines[1:]):
                out.append("\n".join(indent + line for line in lines))
            else:
                out.append(super()._fill_text(para, width, indent))
        return "\n\n".join(out)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        shown = action.default not in (None, False, argparse.SUPPRESS)
        if shown and action.option_strings and not re.search(r"\bdefault\b", text):
            return f"{text} (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """Bad command-line values end in one line, like every other refusal; ``example``
    becomes the epilog, and the formatter is :class:`Formatter`."""

    def __init__(self, *args: Any, example: str = "", **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", Formatter)
        if example:
            kwargs["epilog"] = _join(_example(example), kwargs.get("epilog"))
        super().__init__(*args, **kwargs)
        #: mqlab's own parser: each subcommand's parser by name, as build_parser adds it
        self.commands: dict[str, argparse.ArgumentParser] = {}

    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix("mqlab").strip()  # "run", or "" for mqlab itself
        self.exit(
            EXIT_BAD_INPUT,
            f"mqlab: {where + ': ' if where else ''}{message} (see {self.prog} --help)\n",
        )


def add(
    sub: Any, name: str, help: str, description: str = "", example: str = ""
) -> argparse.ArgumentParser:
    """A subcommand of ``sub`` (argparse's subparsers): ``help`` is its one line in the list
    of commands and the first line of its own help, ``description`` the rest."""
    first = help[:1].upper() + help[1:] + "."
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=_join(first, description), example=example
    )
    return parser


def _join(*paragraphs: str | None) -> str:
    return "\n\n".join(p for p in paragraphs if p)
