"""The house's shape, checked from the code's own imports: no circles, imports that flow one
way between subpackages, few floors, few flat modules; docs/architecture.md true to the tree.

Every import counts, including those under ``TYPE_CHECKING`` and inside functions: they are
still two modules that must know each other.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "mqlab"
DOC = ROOT / "docs" / "architecture.md"
MAX_FLOORS = 9
MAX_FLAT = 20
#: one concept per module, a few hundred lines each
MAX_LINES = 450
# the one-way order of the subpackages, lowest first; a unit may import only units before it
# (and itself). Flat modules of mqlab/ are units of their own, named "mqlab.X".
ORDER = (
    "mqlab.native",
    "mqlab.errors",
    "mqlab.transport",
    "mqlab",  # __init__: the contract re-exported
    "mqlab.codec",
    "mqlab.terminal",
    "mqlab.inputs",
    "mqlab.eventloop",
    "mqlab.netns",
    "mqlab.finder",
    "mqlab.maven",
    "mqlab.bounds",
    "mqlab.netns",
    "mqlab.sdk",
    "mqlab.registry",
    "mqlab.redact",
    "mqlab.loopback",
    "mqlab.measure",
    "mqlab.config",
    "mqlab.record",
    "mqlab.machine",
    "mqlab.rabbitmq",
    "mqlab.live",
    "mqlab.results",
    "mqlab.worker",
    "mqlab.hosts",
    "mqlab.ceiling",
    "mqlab.faults",
    "mqlab.servers",
    "mqlab.run",
    "mqlab.report",
    "mqlab.testing",
    "mqlab.console",
)


def _modules(package: Path = PKG) -> dict[str, Path]:
    out = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


@cache
def graph(package: Path = PKG) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports (anywhere in its body)."""
    mods = _modules(package)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        home = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = home.split(".")[: len(home.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names
                ]
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t.startswith(package.name) and t != name:
                    edges[name].add(t)
    return edges


def unit(module: str) -> str:
    """The subpackage a module belongs to, or the flat module itself."""
    parts = module.split(".")
    if len(parts) == 1:
        return "mqlab"
    if (PKG / parts[1]).is_dir():
        return ".".join(parts[:2])
    return ".".join(parts[:2])


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m) :], m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(edges):
        if n not in state and (found := visit(n)):
            return found
    return None


def unit_graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for a, targets in graph().items():
        edges.setdefault(unit(a), set()).update(unit(b) for b in targets if unit(b) != unit(a))
    return edges


def test_no_module_imports_another_that_imports_it_back() -> None:
    assert _cycle(graph()) is None, "import circle: " + " -> ".join(_cycle(graph()) or [])


def test_no_plugin_has_an_import_circle() -> None:
    for package in sorted((ROOT / "plugins").glob("*/mqlab_*")):
        found = _cycle(graph(package))
        assert found is None, f"import circle in {package.name}: " + " -> ".join(found or [])


def test_subpackages_import_one_way() -> None:
    edges = unit_graph()
    assert set(edges) <= set(ORDER), (
        f"a new unit needs its place in ORDER: {set(edges) - set(ORDER)}"
    )

    def via(a: str, b: str) -> str:
        return ", ".join(
            m for m, ts in sorted(graph().items()) if unit(m) == a and any(unit(t) == b for t in ts)
        )

    upward = [
        f"{a} -> {b} (via {via(a, b)})"
        for a, targets in edges.items()
        for b in targets
        if ORDER.index(b) > ORDER.index(a)
    ]
    assert not upward, "imports that run back up:\n" + "\n".join(upward)


def _floors(edges: dict[str, set[str]]) -> dict[str, int]:
    floors: dict[str, int] = {}

    def floor(n: str) -> int:
        if n not in floors:
            floors[n] = 1 + max((floor(m) for m in edges.get(n, ())), default=0)
        return floors[n]

    for n in edges:
        floor(n)
    return floors


def test_the_house_has_at_most_nine_floors_and_few_flat_modules() -> None:
    floors = _floors(unit_graph())
    assert max(floors.values()) <= MAX_FLOORS, sorted(floors.items(), key=lambda kv: kv[1])
    flat = [p.name for p in PKG.glob("*.py") if p.name != "__init__.py"]
    assert len(flat) <= MAX_FLAT, flat


def test_no_module_is_over_450_lines() -> None:
    over = [
        f"{p.relative_to(ROOT)}: {n}"
        for p in sorted([*PKG.rglob("*.py"), *(ROOT / "plugins").rglob("*.py")])
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    ]
    assert not over, f"modules over {MAX_LINES} lines (split them by concept): {over}"


def _drawn_floors() -> dict[str, int]:
    """docs/architecture.md's floor drawing: each unit (a subpackage or a flat module, one
    a line, its name in the second column) and the floor it is drawn on."""
    text = DOC.read_text()
    block = next(b for b in text.split("```")[1::2] if b.lstrip().startswith("floor "))
    out: dict[str, int] = {}
    floor = 0
    for line in block.splitlines():
        # a unit's name stands in the drawing's second column; deeper lines continue its text
        m = re.match(r"floor (\d+) {2}(\w+)", line) or re.match(r" {9}(\w+)", line)
        if m is None:
            continue
        if line.startswith("floor"):
            floor = int(m.group(1))
        name = m.groups()[-1]
        assert name not in out, f"{name} is drawn twice"
        out[name] = floor
    return out


def test_the_floor_drawing_is_the_import_graph() -> None:
    real = {
        u.removeprefix("mqlab.") if u != "mqlab" else u: f for u, f in _floors(unit_graph()).items()
    }
    drawn = _drawn_floors()
    missing, extra = sorted(set(real) - set(drawn)), sorted(set(drawn) - set(real))
    assert not missing and not extra, f"not drawn: {missing}; drawn, not a unit: {extra}"
    wrong = {u: (drawn[u], real[u]) for u in real if drawn[u] != real[u]}
    assert not wrong, f"drawn on another floor than the imports put it (drawn, real): {wrong}"


def test_every_subpackage_says_what_it_holds() -> None:
    for init in PKG.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc) > 80, f"{init.parent.name}/__init__.py needs a paragraph"


def _doc_modules() -> Iterator[str]:
    for line in DOC.read_text().splitlines():
        if line.startswith("| `mqlab"):
            first = line.split("|")[1]
            yield from re.findall(r"`(mqlab[\w/.]*\.py)`", first)


def test_the_architecture_page_names_every_module_and_only_those() -> None:
    named = list(_doc_modules())
    assert len(named) == len(set(named)), "a module is listed twice"
    real = {str(p.relative_to(ROOT)) for p in PKG.rglob("*.py")}
    assert set(named) <= real, f"listed but missing: {sorted(set(named) - real)}"
    assert real <= set(named), f"not listed: {sorted(real - set(named))}"


#: where frames are sent and received: every one must go through protocol's classes
_FRAME_USERS = ("worker", "run", "faults", "hosts")


def _frames_in_code() -> dict[str, str]:
    """Each frame class's wire ``type`` -> who sends it, from protocol's own classes."""
    from mqlab.worker import protocol

    defined = {
        name: cls
        for name, cls in vars(protocol).items()
        if isinstance(cls, type) and hasattr(cls, "__dataclass_fields__") and hasattr(cls, "TYPE")
    }
    # decode() knows exactly the classes defined: no frame can be sent that is refused
    assert set(defined.values()) == set(protocol.FRAMES), "a frame class is missing from FRAMES"
    types = [cls.TYPE for cls in protocol.FRAMES]
    assert len(types) == len(set(types)), "two frame classes share a type"
    used = "".join(
        p.read_text() for d in _FRAME_USERS for p in (PKG / d).glob("*.py") if p.stem != "protocol"
    )
    for name, cls in defined.items():
        sender = getattr(cls, "FROM", None)
        assert sender in ("worker", "controller"), f"{name}.FROM is {sender!r}"
        assert re.search(rf"\b{name}\(", used), f"frame {name} is never sent"
    return {cls.TYPE: cls.FROM for cls in protocol.FRAMES}


def test_frames_are_sent_and_matched_only_as_protocol_classes() -> None:
    for d in _FRAME_USERS:
        for path in (PKG / d).glob("*.py"):
            if path.stem == "protocol":  # the one place frames meet their maps
                continue
            text = path.read_text()
            raw = re.findall(r'"type": "[\w-]+"|\["type"\]|\.get\("type"', text)
            assert not raw, f"{path.relative_to(ROOT)} builds or reads a frame as a dict: {raw}"


def test_the_control_frame_tables_list_every_frame_and_its_sender() -> None:
    in_code = _frames_in_code()
    assert {"hello", "go", "close-old", "closed-old"} <= set(in_code)  # the scan sees them
    protocol = (PKG / "worker" / "protocol.py").read_text()
    for where, text in (
        ("worker/protocol.py", protocol),
        ("docs/architecture.md", DOC.read_text()),
    ):
        listed = {t: who for who, t in re.findall(r"^\| (\w+) \| ``?([\w-]+)``?", text, re.M)}
        listed |= {
            t: who
            for who, t in re.findall(r"^\| (\w+) \| ``?[\w-]+``? / ``?([\w-]+)``?", text, re.M)
        }
        differ = sorted(set(listed.items()) ^ set(in_code.items()))
        assert not differ, f"{where}'s frame table differs from the code's frames: {differ}"
