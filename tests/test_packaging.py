"""What a user gets from the wheels, not from the editable install: every wheel built, installed
into a new virtual environment outside the checkout with one pip command (`mqlab[all]`), and
the three commands a newcomer runs first: `--help`, `plugins` and the quickstart."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = sorted(p.parent for p in (ROOT / "plugins").glob("*/pyproject.toml"))


def _run(*cmd: str | Path, cwd: Path, timeout: float = 600) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    # a copy of the tree, so a build leaves nothing (build/, *.egg-info) in the checkout
    src = tmp_path_factory.mktemp("src")
    skip = shutil.ignore_patterns(".venv", ".git", "*.egg-info", "build", "__pycache__", ".*_cache")

    def ignore(folder: str, names: list[str]) -> set[str]:
        # results/ of a run beside the checkout, not the package mqlab/results
        top = {"results"} if Path(folder) == ROOT else set()
        return set(skip(folder, names)) | (top & set(names))

    shutil.copytree(ROOT, src / "mqlab", ignore=ignore)
    projects = [src / "mqlab", *(src / "mqlab" / "plugins" / p.name for p in PLUGINS)]
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, *projects, cwd=src)
    return out


def test_the_core_wheel_holds_every_subpackage(wheels: Path) -> None:
    (core,) = wheels.glob("mqlab-*.whl")
    names = zipfile.ZipFile(core).namelist()
    packages = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "mqlab").rglob("__init__.py")}
    missing = [p for p in packages if f"{p}/__init__.py" not in names]
    assert not missing, f"the wheel lacks {missing}"
    assert "mqlab/py.typed" in names


def test_the_wheels_install_and_run_outside_the_checkout(wheels: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    pip = [venv / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run(*pip, "--find-links", wheels, "mqlab[all]", cwd=tmp_path)
    mqlab = venv / "bin" / "mqlab"
    assert "usage: mqlab" in _run(mqlab, "--help", cwd=tmp_path)
    listed = _run(mqlab, "plugins", cwd=tmp_path)
    every = ("loopback", "kombu", "pika", "aiormq", "amqp1", "zmq", "oslo", "pyamqp", "kafka")
    for plugin in (*every, "nats", "mqtt", "redis-streams", "oslo-kafka"):
        assert plugin in listed, f"`mqlab plugins` from the wheels lacks {plugin}:\n{listed}"
    profile = tmp_path / "quickstart.toml"
    shutil.copy(ROOT / "profiles" / "quickstart.toml", profile)
    out = _run(mqlab, "run", profile, "-o", tmp_path / "q.json", cwd=tmp_path)
    assert "lost" in out and (tmp_path / "q.json").stat().st_size > 0
