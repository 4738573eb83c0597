"""The README a newcomer reads first (issue 48), checked against what it describes.

Every command line and option it shows is one the parser takes, with the same metavar; its
commands table is the parser's list of commands, word for word; its walk-through is the
shipped main job; the results file name it gives is the one `mqlab run` writes; its links
land; and it stays short, free of words only the project's history explains.
"""

from __future__ import annotations

import argparse
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from mqlab.console.cli import build_parser
from mqlab.results import paths

from .test_cli_help import commands
from .test_docs_figures import anchor

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PROFILES = ROOT / "profiles"
TEXT = README.read_text()
MAIN_JOB = "profiles/pika-vs-kombu.toml"
#: README.md, the page listing the docs, and the page listing the profiles
PAGES = [README, ROOT / "docs" / "README.md", PROFILES / "README.md"]


def section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def table_rows(text: str) -> list[list[str]]:
    """A Markdown table's body rows, cells stripped, ``\\|`` kept as ``|``."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
            rows.append([c.strip().replace("\\|", "|") for c in cells])
    return rows[1:]


def options_of(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {o: a for a in parser._actions for o in a.option_strings}


def test_the_readme_is_short() -> None:
    assert len(TEXT.splitlines()) < 150


def test_the_walk_through_is_the_shipped_main_job() -> None:
    block = re.search(r"```toml\n(.*?)```", section(TEXT, "The main job's profile"), re.S)
    assert block is not None
    shown = tomllib.loads(block.group(1))
    shipped = tomllib.loads((PROFILES / "pika-vs-kombu.toml").read_text())
    assert shown == shipped


def test_the_commands_table_is_the_parser_word_for_word() -> None:
    parser = build_parser()
    lines = {words: line for words, _, line in commands(parser)}
    rows = table_rows(section(TEXT, "Commands"))
    listed = []
    for usage, says in rows:
        argv = usage.strip("`").split()
        assert argv[0] == "mqlab"
        name = argv[1]
        listed.append(name)
        assert says == lines[(name,)], f"`mqlab {name}`: the README and --help disagree"
        sub = parser.commands[name]
        positionals = [a for a in sub._positionals._group_actions if a.help != argparse.SUPPRESS]
        rest = argv[2:]
        if rest and "|" in rest[0]:  # every action a group or a choice offers, none other
            first = positionals[0]
            offered = (
                first.choices.keys()
                if isinstance(first, argparse._SubParsersAction)
                else first.choices or ()
            )
            assert set(rest[0].split("|")) == set(offered), usage
            continue
        shown_positionals = [t for t in rest if not t.startswith("-")]
        required = {o for a in sub._actions if a.required for o in a.option_strings[:1]}
        options = options_of(sub)
        for i, token in enumerate(rest):
            if token.startswith("-"):
                assert token in options, f"{usage}: {token} is no option of mqlab {name}"
                assert options[token].metavar == rest[i + 1], usage
                required.discard(options[token].option_strings[0])
        values = {rest[i + 1] for i, t in enumerate(rest) if t.startswith("-")}
        shown_positionals = [t for t in shown_positionals if t not in values]
        assert shown_positionals == [a.metavar for a in positionals], usage
        assert not required, f"{usage}: leaves out {required}"
    assert sorted(listed) == sorted(parser.commands), "one row per command, every command"


def _command_lines() -> list[str]:
    """Every mqlab command line the README shows outside the commands table, the set-up
    script's runs as the mqlab command each execs (scripts/setup.sh)."""
    text = TEXT.replace(section(TEXT, "Commands"), "")
    found = re.findall(r"`(?:\.venv/bin/)?(mqlab [^`]+)`", text)
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.splitlines():
            m = re.match(r"(?:\.venv/bin/)?(mqlab\s.*?)\s*(?:#.*)?$", line)
            if m:
                found.append(m.group(1))
    for rest in re.findall(r"bash scripts/setup\.sh run\b([^`#\n]*)", text.replace("\n", " ")):
        args = rest.split()
        profile = args.pop(0) if args and args[0].endswith(".toml") else MAIN_JOB
        found.append(" ".join(["mqlab", "run", profile, *args]))
    return found


def test_the_readme_shows_mqlab_commands() -> None:
    # the parse below checks something only if the README's command lines are found
    lines = _command_lines()
    assert f"mqlab run {MAIN_JOB}" in lines and "mqlab run profiles/quickstart.toml" in lines
    assert 'exec .venv/bin/mqlab run "$profile"' in (ROOT / "scripts/setup.sh").read_text()


@pytest.mark.parametrize("line", _command_lines())
def test_every_command_line_the_readme_shows_parses(line: str) -> None:
    args, extra = build_parser().parse_known_args(shlex.split(line)[1:])
    assert extra == [], f"{line}: {extra}"
    assert args.func is not None
    profile = getattr(args, "profile", "PROFILE")
    assert profile.isupper() or (ROOT / profile).is_file(), f"{line}: no {profile}"


def test_every_option_the_readme_names_takes_what_it_says() -> None:
    parser = build_parser()
    everywhere = [options_of(p) for _, p, _ in commands(parser)]
    named = re.findall(r"`(-{1,2}[a-z][\w-]*)(?: ([A-Z]+))?`", TEXT)
    assert ("-o", "FILE") in named
    for option, metavar in named:
        if option == "--help":
            continue
        takes = [o[option] for o in everywhere if option in o]
        assert takes, f"{option}: no command has it"
        if metavar:
            assert any(a.metavar == metavar for a in takes), f"`{option} {metavar}`"
        else:
            assert any(a.nargs == 0 for a in takes), f"`{option}` takes a value"


def test_the_results_name_the_readme_gives_is_the_one_run_writes() -> None:
    # tests/test_cli_help.py checks that the name is the one paths.default_path makes
    assert paths.DEFAULT_NAME in TEXT


def test_every_profile_is_listed_once_and_only_shipped_ones() -> None:
    listed = [
        row[0].strip("`")
        for row in table_rows((PROFILES / "README.md").read_text())
        if row[0].startswith("`")
    ]
    shipped = [*sorted(p.name for p in PROFILES.glob("*.toml")), "pinning/"]
    assert sorted(listed) == sorted(shipped)
    in_readme = [row[0].strip("`") for row in table_rows(section(TEXT, "Profiles"))]
    assert 3 <= len(in_readme) <= 4 and set(in_readme) <= set(shipped)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_lands(page: Path) -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"\w+://", target):
            continue
        path, _, fragment = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            broken.append(target)
        elif fragment and where.suffix == ".md":
            headings = [line for line in where.read_text().splitlines() if line[:1] == "#"]
            if fragment not in {anchor(h) for h in headings}:
                broken.append(target)
    assert broken == []


def test_the_readme_uses_no_word_only_the_project_s_history_explains() -> None:
    words = ["seed", "receipt ledger", "still_queued", "spontaneous", "broker_flow",
             "reference loop", "OpenStack report"]  # fmt: skip
    found = [w for w in words if re.search(rf"\b{w}", TEXT, re.I)]
    assert found == []
