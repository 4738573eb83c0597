"""What a user gets from the wheels, not from the editable install: every wheel built, installed
into a new virtual environment outside the checkout with one pip command (`mqlab[all]`), and
the three commands a newcomer runs first: `--help`, `plugins` and the quickstart.

The core wheel is built both ways: on this machine, which has a C compiler, with its hot
modules compiled (mypyc); and as on a machine without one (``CC`` names no compiler), pure
Python. Each installs and runs, and its results say which path ran."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from mqlab import native

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = sorted(p.parent for p in (ROOT / "plugins").glob("*/pyproject.toml"))
#: a loopback cast step on the per-message path the hot modules hold (msgpack, no envelope)
HOT_PROFILE = """
[run]
name = "hot"
duration = "1s"
warmup = "0.5s"
[drivers.loopback]
plugin = "loopback"
[defaults]
serializer = "msgpack"
envelope = false
message_size = 64
[[scenario]]
pattern = "cast"
concurrency = [4]
"""


def _run(*cmd: str | Path, cwd: Path, timeout: float = 600, **env: str) -> str:
    # the build decides from the machine, not from whatever the caller's shell set
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "MQLAB_COMPILE", "MQLAB_PURE", "CC")
    environ = {k: v for k, v in os.environ.items() if k not in drop} | env
    done = subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tree, so a build leaves nothing (build/, *.egg-info) in the checkout."""
    src = tmp_path_factory.mktemp("src")
    skip = shutil.ignore_patterns(
        ".venv", ".git", "*.egg-info", "build", "__pycache__", ".*_cache", "*.so", "native.json"
    )

    def ignore(folder: str, names: list[str]) -> set[str]:
        # results/ of a run beside the checkout, not the package mqlab/results
        top = {"results"} if Path(folder) == ROOT else set()
        return set(skip(folder, names)) | (top & set(names))

    shutil.copytree(ROOT, src / "mqlab", ignore=ignore)
    return src


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    src = _copy(tmp_path_factory)
    pip = (sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out)
    _run(*pip, src / "mqlab", cwd=src)  # as a user builds it: its build requirements fetched
    # the plugins are plain setuptools projects: built with this environment's setuptools
    # rather than eleven fresh build environments (a minute of the suite's time)
    plugins = [src / "mqlab" / "plugins" / p.name for p in PLUGINS]
    _run(*pip, "--no-build-isolation", *plugins, cwd=src)
    return out


@pytest.fixture(scope="module")
def pure_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The core wheel as a machine without a C compiler builds it."""
    out = tmp_path_factory.mktemp("pure")
    src = _copy(tmp_path_factory)
    pip = (sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, src / "mqlab")
    _run(*pip, cwd=src, CC=str(src / "no-such-compiler"))
    (wheel,) = out.glob("mqlab-*.whl")
    return wheel


def _names(wheel: Path) -> set[str]:
    return set(zipfile.ZipFile(wheel).namelist())


def _compiled(names: set[str], module: str) -> bool:
    stem = module.replace(".", "/")
    return any(n.startswith(stem + ".") and n.endswith(".so") for n in names)


def test_the_core_wheel_holds_every_subpackage(wheels: Path) -> None:
    (core,) = wheels.glob("mqlab-*.whl")
    names = _names(core)
    packages = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "mqlab").rglob("__init__.py")}
    missing = [p for p in packages if f"{p}/__init__.py" not in names]
    assert not missing, f"the wheel lacks {missing}"
    assert "mqlab/py.typed" in names
    # built with a compiler: every hot module compiled, its source kept beside it
    for module in (*native.HOT, native.GROUP + "__mypyc"):
        assert _compiled(names, module), f"the wheel lacks {module} compiled"
    assert {str(native.source(m, Path("mqlab"))) for m in native.HOT} <= names
    assert "mqlab/native.json" in names


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
    assert _harness_run(mqlab, tmp_path)["path"] == "compiled"
    # a hot module's source edited after the build: its edit runs, not the stale compiled code
    site = _run(
        venv / "bin" / "python", "-c", "import mqlab; print(mqlab.__path__[0])", cwd=tmp_path
    )
    with open(Path(site.strip()) / "codec.py", "a") as f:
        f.write("\n# edited after the build\n")
    harness = _harness_run(mqlab, tmp_path)
    assert harness["path"] == "pure" and "mqlab/codec.py" in harness["why"], harness


def test_a_wheel_built_without_a_compiler_runs_pure(pure_wheel: Path, tmp_path: Path) -> None:
    names = _names(pure_wheel)
    assert pure_wheel.name.endswith("-py3-none-any.whl"), pure_wheel.name
    assert not [n for n in names if n.endswith(".so")] and "mqlab/native.json" not in names
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    pip = [venv / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run(*pip, pure_wheel, cwd=tmp_path)
    harness = _harness_run(venv / "bin" / "mqlab", tmp_path)
    assert harness["path"] == "pure" and "not compiled" in harness["why"], harness


def _harness_run(mqlab: Path, tmp_path: Path) -> dict[str, str]:
    """A loopback cast on the hot path; what its results say the harness ran."""
    profile = tmp_path / "hot.toml"
    profile.write_text(HOT_PROFILE)
    _run(mqlab, "run", profile, "-o", tmp_path / "hot.json", cwd=tmp_path)
    results = json.loads((tmp_path / "hot.json").read_text())
    (step,) = results["steps"]
    assert step["received"] > 0 and step["lost"] == 0, step
    harness: dict[str, str] = results["environment"]["harness"]
    return harness
