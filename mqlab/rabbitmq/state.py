"""Where private nodes are recorded, so a later ``mqlab broker status``/``stop`` finds them.

Each node's directory holds ``node.json``: the node, what tells its beam from a
later process with a reused pid, the epmd it registered with, and its place in
the cluster. Start and stop on one state dir are serialised by a lock file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mqlab.errors import BrokerError
from mqlab.rabbitmq import host
from mqlab.rabbitmq.node import BrokerNode

_RECORD = "node.json"
_LOCK = ".lock"


def default_state_dir() -> Path:
    """Where mqlab keeps its private brokers: ``$MQLAB_STATE_DIR``, else ``$XDG_STATE_HOME/mqlab``,
    else ``~/.local/state/mqlab``."""
    explicit = os.environ.get("MQLAB_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    # The XDG spec says relative values are invalid and must be ignored.
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "mqlab"
    return Path.home() / ".local" / "state" / "mqlab"


def resolve(state_dir: Path | None) -> Path:
    return (state_dir if state_dir is not None else default_state_dir()).expanduser().absolute()


@dataclass(frozen=True)
class Record:
    """What node.json holds: the node plus what is needed to recognise and clean it up."""

    node: BrokerNode
    create_time: float  # the beam's start time: tells our beam from a reused pid
    epmd_port: int  # the epmd the node registered with (ERL_EPMD_PORT at start)
    epmd_started: bool  # True if epmd was not running before this cluster started it
    index: int = 1  # the node's place in its cluster: 1 is the node the others join
    seed: str = ""  # the name of the cluster's node 1 ("" in records older than clusters)

    @property
    def alive(self) -> bool:
        """True if the recorded beam is still running (not some later process with its pid)."""
        return host.same_process(self.node.pid, self.create_time)

    def to_json(self) -> str:
        data: dict[str, Any] = asdict(self.node)
        data["state_dir"] = str(self.node.state_dir)
        data.update(
            create_time=self.create_time,
            epmd_port=self.epmd_port,
            epmd_started=self.epmd_started,
            index=self.index,
            seed=self.seed,
        )
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def load(cls, path: Path, state_dir: Path) -> Record:
        """The record in ``path``; BrokerError (one line) if any field is not what mqlab
        writes: a pid mqlab would signal (``stop``) must be a real process's, never 0
        (``kill(0)`` signals the whole process group), negative or init."""
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            node = BrokerNode(
                name=_text(data, "name"),
                url=_text(data, "url"),
                management_url=_text(data, "management_url"),
                port=_whole(data, "port", 1, 65535),
                management_port=_whole(data, "management_port", 1, 65535),
                dist_port=_whole(data, "dist_port", 1, 65535),
                pid=_whole(data, "pid", 2, MAX_PID),
                state_dir=state_dir,
                version=_text(data, "version"),
                prometheus_port=_whole(data, "prometheus_port", 0, 65535, 0),
            )
            created: Any = data.get("create_time")
            if type(created) not in (int, float) or not 0 <= created < 1e11:
                raise ValueError(f"create_time: expected a time in seconds, got {created!r:.40}")
            return cls(
                node,
                float(created),
                _whole(data, "epmd_port", 1, 65535),
                bool(data.get("epmd_started")),
                _whole(data, "index", 1, 64, 1),
                _text(data, "seed", node.name),
            )
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            raise BrokerError(
                f"cannot read broker record {path}: {exc} (stop the node by hand, then delete it)"
            ) from None


#: Linux's largest pid (pid_max is at most 2**22)
MAX_PID = 2**22


def _whole(data: dict[str, Any], key: str, lo: int, hi: int, default: int | None = None) -> int:
    value = data.get(key, default)
    if type(value) is not int or not lo <= value <= hi:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ValueError(f"{key}: expected a whole number {lo} .. {hi:,}, got {shown}")
    return value


def _text(data: dict[str, Any], key: str, default: str | None = None) -> str:
    value = data.get(key, default)
    if type(value) is not str or not value or len(value) > 2048:
        raise ValueError(f"{key}: expected a non-empty text, got {str(value)[:40]!r}")
    return value


def record_path(node: BrokerNode) -> Path:
    return node.node_dir / _RECORD


def records(state_dir: Path) -> list[Record]:
    """Every node recorded in ``state_dir``, in cluster order."""
    if not state_dir.is_dir():
        return []
    found = [Record.load(path, state_dir) for path in state_dir.glob(f"*/{_RECORD}")]
    return sorted(found, key=lambda r: (r.index, r.node.name))


def write(record: Record) -> None:
    path = record_path(record.node)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(record.to_json())
    tmp.replace(path)  # atomic: status() never reads half a record


def forget(node: BrokerNode) -> None:
    record_path(node).unlink(missing_ok=True)


@contextlib.contextmanager
def locked(state_dir: Path, timeout: float) -> Iterator[None]:
    """Serialise start/stop on one state dir across processes."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        lock = open(state_dir / _LOCK, "a")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise BrokerError(f"cannot use state dir {state_dir}: {exc} (choose --state-dir)") from exc
    deadline = time.monotonic() + timeout
    with lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise BrokerError(
                        f"another mqlab process is starting or stopping a broker in {state_dir} "
                        "(wait for it, then retry)"
                    ) from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
