"""A step's record is declared once: its types are the results file's keys, the reader's
check and docs/results.md's table, and no second list of its keys or second step type
grows anywhere else in mqlab.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from mqlab.record import cpu, events, figures, sections, values
from mqlab.record.step import StepRecord
from mqlab.record.wire import shape_of

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "mqlab"
#: a class or a literal collection naming this many of a step's measured keys (its cell's,
#: the scenario's definition, are the profile's too) declares the step again
AGAIN = 12
#: other formats' own columns, chosen from the record (not its declaration): where and why
VIEWS = {
    ("mqlab/report/csvexport.py", "STEP_COLUMNS"): "the CSV file's columns, flattened",
}
STEP_KEYS = set(shape_of(StepRecord).fields)
MEASURED = STEP_KEYS - set(shape_of(figures.Cell).fields)


def _flat_sections(cls: type) -> list[type]:
    out = [cls]
    for f in dataclasses.fields(cls):
        if f.metadata.get("flat"):
            out += _flat_sections(f.type if isinstance(f.type, type) else _type_of(cls, f.name))
    return out


def _type_of(cls: type, name: str) -> type:
    import typing

    hint = typing.get_type_hints(cls)[name]
    assert isinstance(hint, type)
    return hint


def test_every_key_of_a_step_is_declared_by_exactly_one_field() -> None:
    seen: dict[str, str] = {}
    for cls in _flat_sections(StepRecord):
        for f in dataclasses.fields(cls):
            if f.metadata.get("flat"):
                continue
            key = f.metadata.get("wire") or f.name
            assert key not in seen, f"{key!r} declared by {seen[key]} and {cls.__name__}"
            seen[key] = cls.__name__
    assert set(seen) == STEP_KEYS


def _names(node: ast.AST) -> set[str]:
    """The step keys a class declares as fields, a literal collection or map holds as
    strings, or a call names as its keywords (a shape written out by hand)."""
    if isinstance(node, ast.ClassDef):
        fields = {
            s.target.id
            for s in node.body
            if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
        }
        return fields & MEASURED
    if isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict):
        elts = node.keys if isinstance(node, ast.Dict) else node.elts
        strings = {e.value for e in elts if isinstance(e, ast.Constant)}
        return {s for s in strings if isinstance(s, str)} & MEASURED
    if isinstance(node, ast.Call):
        # a type built field by field is checked against its declaration (mypy): only a
        # function taking the keys as keywords writes a shape out again
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        callee = node.func.id if isinstance(node.func, ast.Name) else callee
        if callee[:1].isupper():
            return set()
        return {k.arg for k in node.keywords if k.arg} & MEASURED
    return set()


def _declared_name(tree: ast.Module, node: ast.AST) -> str:
    for parent in ast.walk(tree):
        if isinstance(parent, ast.Assign | ast.AnnAssign) and parent.value is node:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            return ", ".join(t.id for t in targets if isinstance(t, ast.Name))
    return getattr(node, "name", "")


def test_no_second_list_of_step_keys_or_second_step_type_appears() -> None:
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel.startswith("mqlab/record/"):
            continue  # the one declaration (its sections checked above)
        tree = ast.parse(path.read_text(), rel)
        for node in ast.walk(tree):
            names = _names(node)
            if len(names) >= AGAIN and (rel, _declared_name(tree, node)) not in VIEWS:
                found.append(f"{rel}:{node.lineno} {_declared_name(tree, node)}: {sorted(names)}")
    assert not found, "the step's keys declared again:\n" + "\n".join(found)


def test_the_check_catches_a_second_declaration() -> None:
    # a copy of the old second step type, as it was: the scan would refuse it
    copy = ast.parse(
        "class Step:\n"
        + "".join(f"    {k}: int\n" for k in sorted(MEASURED)[:AGAIN])
    )  # fmt: skip
    assert len(_names(copy.body[0])) >= AGAIN


def _documented() -> dict[str, set[str]]:
    """docs/results.md's step table: each key, and the keys named under it (``cpu.nodes``)."""
    text = (ROOT / "docs" / "results.md").read_text()
    table = text.split("## A step\n", 1)[1].split("\n## ", 1)[0]
    out: dict[str, set[str]] = {}
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        for name in re.findall(r"`([\w.]+)`", line.split("|")[1]):
            top, _, sub = name.partition(".")
            out.setdefault(top, set()).update({sub} if sub else set())
    return out


_NESTED = {"cpu": cpu.Cpu, "throughput": values.Throughput}


def test_docs_results_md_names_every_key_of_the_record_and_no_other() -> None:
    documented = _documented()
    assert set(documented) == STEP_KEYS, (
        f"undocumented: {sorted(STEP_KEYS - set(documented))}; "
        f"documented but not in the record: {sorted(set(documented) - STEP_KEYS)}"
    )
    for top, subs in documented.items():
        if subs:
            keys = set(shape_of(_NESTED[top]).fields)
            assert subs <= keys, f"{top}: {sorted(subs - keys)} are not its keys"


def test_every_record_type_declares_a_shape_for_every_field() -> None:
    for module in (values, cpu, events, figures, sections):
        for cls in vars(module).values():
            ours = isinstance(cls, type) and cls.__module__ == module.__name__
            if ours and dataclasses.is_dataclass(cls):
                shape_of(cls)  # raises naming a field without a shape
