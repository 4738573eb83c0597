"""Where a run's results go: one policy for the results file's path.

mqlab writes only regular files that it creates or has already written itself:
never a device, a directory, its own profile or a file it did not write; two
runs never share a file (each holds an exclusive lock beside it for its whole
run); the default path stays inside ``results/`` with a safe file name, however
the run is named.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import stat
import tempfile
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

RESULTS_DIR = Path("results")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_PEEK = 4096


class OutputRefused(ValueError):
    """The results path breaks the policy; the message says why and what to do."""


def safe_stem(name: str) -> str:
    """A run name as a file name: no separators, no leading dot, at most 64 characters."""
    stem = _UNSAFE.sub("_", name).strip("._")[:64]
    return stem or "run"


#: the default path, as the command line's help and the docs give it
DEFAULT_NAME = "results/<run name>-<UTC time>-<6 random hex digits>.json"


def default_path(run_name: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    # the random part keeps two runs started in the same second apart
    return RESULTS_DIR / f"{safe_stem(run_name)}-{stamp}-{uuid.uuid4().hex[:6]}.json"


def _head(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(_PEEK)
    except OSError:
        return None


def results_file(path: Path) -> bool:
    """A results file mqlab wrote: a JSON object that starts with its schema number."""
    head = _head(path)
    if head is None or not head.lstrip().startswith(b'{\n "schema":'):
        return False
    with contextlib.suppress(OSError, ValueError, RecursionError):
        doc = json.loads(path.read_bytes())
        return isinstance(doc, dict) and isinstance(doc.get("steps"), list)
    return False


def report_file(path: Path) -> bool:
    """An HTML report mqlab wrote (``mqlab report``)."""
    head = _head(path) or b""
    return head.startswith(b"<!DOCTYPE html>") and b"<title>mqlab report: " in head


def check(
    path: Path, protect: str, ours: Callable[[Path], bool] = results_file, what: str = "results"
) -> None:
    """Refuse an output path that would destroy or mix a file; the one-line reason.

    ``protect`` is the input (a profile, a results file) that must never be the output.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise OutputRefused(f"{path}: cannot use as {what} file: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):  # even a dangling one: writing through it lands elsewhere
        raise OutputRefused(
            f"{path} is a symbolic link; mqlab writes only regular files (give the file itself "
            "or a new name with -o)"
        )
    if not stat.S_ISREG(st.st_mode):
        raise OutputRefused(f"{path} is not a regular file; give a new file name with -o")
    with contextlib.suppress(OSError):
        if os.path.samefile(path, protect):
            raise OutputRefused(f"{path} is the input itself; give another file with -o")
    if st.st_size and not ours(path):
        raise OutputRefused(
            f"{path} exists and is not an mqlab {what} file; mqlab will not overwrite it "
            "(give a new file name with -o)"
        )


def replace_atomically(path: Path, text: str, prefix: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, flush it to disk, then rename it
    over ``path``: a reader, a crash or a full disk never sees half a file, and a failed
    write (OSError, raised) leaves the previous file whole and no temporary file behind."""
    replace_all_atomically([(path, text)], prefix)


def replace_all_atomically(files: Sequence[tuple[Path, str]], prefix: str) -> None:
    """Several files that belong together, as :func:`replace_atomically` writes one: every
    one written to its temporary file and flushed first, only then all renamed, so a full
    disk leaves the old set whole rather than a new file beside an old one."""
    written: list[tuple[str, Path]] = []
    try:
        for path, text in files:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=prefix, dir=path.parent)
            written.append((tmp, path))
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        while written:
            tmp, path = written[0]
            os.replace(tmp, path)
            written.pop(0)
    except BaseException:
        for tmp, _ in written:
            Path(tmp).unlink(missing_ok=True)
        raise


class OutputLock:
    """An exclusive lock on ``<dir>/.<name>.lock`` for as long as a run writes ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock_path = path.parent / f".{path.name}.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise OutputRefused(
                    f"{self.path} is being written by another mqlab run; give another -o"
                ) from None
            # the holder before us may have removed the lock file between our open and lock
            try:
                same = os.fstat(fd).st_ino == os.stat(self.lock_path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._fd = fd
                return
            os.close(fd)

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.lock_path)
            os.close(self._fd)
            self._fd = None


def claim(output: str | None, run_name: str, profile_path: str) -> OutputLock:
    """The locked results path of this run: ``output`` if given, else a new default one."""
    path = Path(output) if output else default_path(run_name)
    lock = OutputLock(path)
    try:
        check(path, profile_path)
        lock.acquire()
        check(path, profile_path)  # again under the lock: another run may have just written it
    except OSError as exc:
        lock.release()
        raise OutputRefused(f"{path}: cannot write the results file: {exc.strerror}") from None
    except OutputRefused:
        lock.release()
        raise
    return lock
