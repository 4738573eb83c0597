"""docs/writing-a-plugin.md stays true to the SDK: every public helper a plugin may import is
listed, and every server name a plugin may declare."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import mqlab.sdk
from mqlab.servers.managed import STARTERS

GUIDE = (Path(__file__).resolve().parent.parent / "docs" / "writing-a-plugin.md").read_text()


def test_every_sdk_helper_is_in_the_guide() -> None:
    missing = []
    for info in pkgutil.iter_modules(mqlab.sdk.__path__, "mqlab.sdk."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            public = not name.startswith("_") and getattr(obj, "__module__", None) == info.name
            if public and (inspect.isfunction(obj) or inspect.isclass(obj)) and name not in GUIDE:
                missing.append(f"{info.name}.{name}")
    assert not missing, f"docs/writing-a-plugin.md does not list {missing}"


def test_every_managed_server_name_is_in_the_guide() -> None:
    for name in STARTERS:
        assert f'| `"{name}"` |' in GUIDE, f"Features.server {name!r} is not in the guide's table"


def test_the_beanstalk_example_uses_only_what_the_guide_names() -> None:
    """examples/beanstalk was written from the guide alone: every name it imports from mqlab
    is one the guide names, or the contract and error tree it points to define."""
    root = Path(__file__).resolve().parent.parent
    defined = (root / "mqlab/transport.py").read_text() + (root / "mqlab/errors.py").read_text()
    source = (root / "examples/beanstalk/mqlab_beanstalk.py").read_text()
    unnamed = [
        f"{node.module}.{alias.name}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mqlab")
        for alias in node.names
        if alias.name not in GUIDE
        and not re.search(rf"^(class |def )?{alias.name}\b", defined, re.MULTILINE)
    ]
    assert not unnamed, f"the example imports what the guide does not name: {unnamed}"
