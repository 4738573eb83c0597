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
        try:
            data = json.loads(path.read_text())
            node = BrokerNode(
                name=str(data["name"]),
                url=str(data["url"]),
                management_url=str(data["management_url"]),
                port=int(data["port"]),
                management_port=int(data["management_port"]),
                dist_port=int(data["dist_port"]),
                pid=int(data["pid"]),
                state_dir=state_dir,
                version=str(data["version"]),
                prometheus_port=int(data.get("prometheus_port", 0)),
            )
            return cls(
                node,
                float(data["create_time"]),
                int(data["epmd_port"]),
                bool(data["epmd_started"]),
                int(data.get("index", 1)),
                str(data.get("seed", node.name)),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BrokerError(
                f"cannot read broker record {path}: {exc} (stop the node by hand, then delete it)"
            ) from exc


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
