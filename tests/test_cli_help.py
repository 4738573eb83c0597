"""Every command's ``--help`` (issue 48): what a user reads before running anything.

Each command and subcommand, found by walking the parser (so a command added later is held
to the same rules without a line here): a one-line description, help on every argument, one
naming scheme for what an argument takes, every default shown, and one example that the
parser itself accepts. The exit codes are listed once, in ``mqlab --help``.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator

import pytest

from mqlab.console import common, helptext
from mqlab.console.cli import build_parser, main
from mqlab.results import paths


def commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str]]:
    """(command words, parser, its one line in its parent's list) for every subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            lines = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*words, name), sub, lines.get(name, "")
                yield from commands(sub, (*words, name))


def arguments(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """A parser's own arguments a user can give (not -h, not hidden, not subcommands)."""
    for a in parser._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if a.help != argparse.SUPPRESS:
            yield a


ALL = list(commands(build_parser()))
IDS = [" ".join(words) for words, _, _ in ALL]


def test_the_walk_finds_every_command() -> None:
    # the tests below hold every command to the rules only if the walk reaches them all
    assert {"run", "ceiling", "show", "compare", "broker", "hosts certs", "hosts up"} <= set(IDS)


@pytest.mark.parametrize(("words", "parser", "line"), ALL, ids=IDS)
def test_each_command_says_in_one_line_what_it_does(
    words: tuple[str, ...], parser: argparse.ArgumentParser, line: str
) -> None:
    assert line and "\n" not in line and len(line) <= 80, f"mqlab {' '.join(words)}: {line!r}"
    first = (parser.description or "").split("\n\n")[0]
    assert first == line[0].upper() + line[1:] + ".", "its own help opens with that line"


@pytest.mark.parametrize(("words", "parser", "line"), ALL, ids=IDS)
def test_each_command_has_one_example_the_parser_takes(
    words: tuple[str, ...], parser: argparse.ArgumentParser, line: str
) -> None:
    found = helptext.examples(parser)
    assert len(found) == 1, f"mqlab {' '.join(words)}: one example in its epilog, not {found}"
    argv = shlex.split(found[0])
    assert argv[0] == "mqlab" and tuple(argv[1 : 1 + len(words)]) == words
    # parsed for real: every option and value of the example exists with that meaning
    args, extra = build_parser().parse_known_args(argv[1:])
    assert extra == []
    own = parser.get_default("func")  # None: a group (hosts), whose example is one of its own
    assert args.func is own or own is None


@pytest.mark.parametrize(("words", "parser", "line"), ALL, ids=IDS)
def test_each_argument_is_described_and_named_in_one_scheme(
    words: tuple[str, ...], parser: argparse.ArgumentParser, line: str
) -> None:
    where = f"mqlab {' '.join(words)}"
    for a in arguments(parser):
        name = "/".join(a.option_strings) or a.dest
        assert a.help, f"{where} {name}: no help"
        if a.nargs == 0:  # a flag: nothing to name, no default to show
            continue
        if a.choices is not None and not a.option_strings:  # {start,stop,status}
            assert all(str(c) in a.help for c in a.choices), f"{where}: each choice explained"
            continue
        metavar = a.metavar if isinstance(a.metavar, str) else (a.dest.upper())
        assert metavar in helptext.METAVARS, f"{where} {name}: metavar {metavar!r}"
        if a.option_strings and not a.required:
            shown = parser.formatter_class(prog="mqlab")._get_help_string(a) or ""
            assert re.search(r"\bdefault\b", shown), f"{where} {name}: default not shown"


def test_the_exit_codes_are_listed_once_in_mqlab_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    codes = [common.EXIT_OK, common.EXIT_FAILED, common.EXIT_BAD_INPUT, common.EXIT_INTERRUPTED]
    for code in codes:
        assert re.search(rf"^  {code}\s+\w", text, re.M), f"exit status {code} in mqlab --help"
    for words, parser, _ in ALL:
        assert "exit status" not in parser.format_help(), f"mqlab {' '.join(words)} repeats it"


def test_a_bad_option_exits_with_the_status_help_gives_for_bad_input(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["show", "r.json", "--verbose", "--markdown"]) == common.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--markdown" in err
    with pytest.raises(SystemExit) as exc:
        main(["run", "p.toml", "--duration", "soon"])
    assert exc.value.code == common.EXIT_BAD_INPUT


def test_the_default_results_name_in_help_is_the_one_run_writes() -> None:
    run = build_parser().commands["run"]
    output = next(a for a in run._actions if "--output" in a.option_strings)
    assert paths.DEFAULT_NAME in (output.help or "")
    # the name help gives, its <placeholders> matched against the path run makes
    pattern = "(.+)".join(re.escape(part) for part in re.split(r"<[^>]+>", paths.DEFAULT_NAME))
    made = str(paths.default_path("pika-vs-kombu"))
    match = re.fullmatch(pattern, made)
    assert match, f"{made} is not {paths.DEFAULT_NAME}"
    name, stamp, random = match.groups()
    assert name == "pika-vs-kombu"
    assert re.fullmatch(r"\d{8}T\d{6}Z", stamp), "UTC time"
    assert re.fullmatch(r"[0-9a-f]{6}", random), "6 random hex digits"


@pytest.mark.parametrize(("words", "parser", "line"), ALL, ids=IDS)
def test_help_uses_no_word_only_the_project_s_history_explains(
    words: tuple[str, ...], parser: argparse.ArgumentParser, line: str
) -> None:
    # the documents mqlab grew out of are not in the package: name them by what they are
    assert not re.search(r"\bseed\b", parser.format_help() + line, re.I)
