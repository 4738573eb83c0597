"""What the docs and the profiles' comments say about the code, held against the code
(issue 45): the layout docs/development.md draws names the tree as it is, an option default
a profile quotes is the plugin's default, and the ceiling profile has every driver whose
plugin ships a reference loop (tests/test_readme.py holds profiles/README.md's table to the
shipped profiles)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from mqlab import finder, registry

ROOT = Path(__file__).resolve().parent.parent
DEVELOPMENT = (ROOT / "docs" / "development.md").read_text()
PROFILES = sorted((ROOT / "profiles").rglob("*.toml"))


def _layout() -> str:
    """docs/development.md's Layout block, the mqlab/ entry only."""
    block = DEVELOPMENT.split("## Layout", 1)[1].split("```", 2)[1]
    return block.split("examples/", 1)[0]


def test_the_layout_names_the_core_s_subpackages_and_modules_as_they_are() -> None:
    text = " ".join(_layout().split())
    packages, modules_part = text.split("draws them):", 1)[1].split("; beside them", 1)
    named = set(re.findall(r"\b([a-z]+) \(", packages))  # "console (the command line)", ...
    subpackages = {p.parent.name for p in (ROOT / "mqlab").glob("*/__init__.py")}
    assert named == subpackages
    listed = re.findall(r"\(([a-z, ]+)\)", modules_part)  # "(transport, errors)", ...
    modules = {m.strip() for group in listed for m in group.split(",") if "," in group}
    assert modules, "the layout lists no module"
    missing = sorted(m for m in modules if not (ROOT / "mqlab" / f"{m}.py").exists())
    assert missing == [], f"the layout names modules that do not exist: {missing}"


def _comments(path: Path) -> str:
    """A profile's comments as one text (a sentence may run over lines)."""
    out = []
    for line in path.read_text().splitlines():
        if "#" in line:
            out.append(line.split("#", 1)[1].strip())
    return " ".join(out)


#: "`connections = "pool"` (the default)", "commit = "after" (the plugin's default)"
_ONE = re.compile(r"`?([a-z_]+) = (\"[^\"]*\"|[\w.\-]+)`? \((?:the|its|the plugin's) default\b")
#: "(retry = 0, mandatory = false, ...: the plugin's defaults)"
_LIST = re.compile(r"\(([^()]*): (?:the plugin's|its) defaults\)")
_PAIR = re.compile(r"\b([a-z_]+) = (\"[^\"]*\"|[\w.\-]+)")


def _quoted_defaults(text: str) -> list[tuple[str, Any]]:
    pairs = [m.groups() for m in _ONE.finditer(text)]
    for group in _LIST.finditer(text):
        pairs += [m.groups() for m in _PAIR.finditer(group.group(1))]
    return [(name, tomllib.loads(f"v = {raw}")["v"]) for name, raw in pairs]


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_an_option_default_a_profile_quotes_is_the_plugin_s(path: Path) -> None:
    doc = tomllib.loads(path.read_text())
    plugins = {table["plugin"] for table in doc.get("drivers", {}).values()}
    for name, value in _quoted_defaults(_comments(path)):
        defaults = [
            registry.get(p).cls.option_specs[name].default
            for p in plugins
            if name in registry.get(p).cls.option_specs
        ]
        assert defaults, f"{path.name}: quotes a default of {name!r}, which no driver has"
        assert value in defaults, f"{path.name}: {name} = {value!r} is not the default {defaults}"


def test_the_rule_catches_the_claim_issue_45_found() -> None:
    said = "(retry = 0, mandatory = false, no-ack, TCP_USER_TIMEOUT 0.25 s: the plugin's defaults)"
    assert _quoted_defaults(said) == [("retry", 0), ("mandatory", False)]
    assert registry.get("pika").cls.option_specs["retry"].default != 0


def test_the_ceiling_profile_runs_every_plugin_that_ships_a_reference_loop() -> None:
    doc = tomllib.loads((ROOT / "profiles" / "ceiling.toml").read_text())
    ran = {table["plugin"] for table in doc["drivers"].values()}
    shipped = set(finder.discover(group=finder.REFERENCES))
    assert ran == shipped
