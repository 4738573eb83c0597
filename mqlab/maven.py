"""Jars from Maven Central, checked against its SHA-1 files, cached under ``~/.cache/mqlab``.

A Java program mqlab runs (a managed Kafka broker) is a pinned list of jars:
the artifact and every library its start-up loads, as ``mvn
dependency:list -DincludeScope=runtime`` resolved them once. Pinning the list,
rather than resolving at run time, needs no Maven on the machine and gives the
same classpath everywhere. A jar is downloaded once into its cache directory
(``$XDG_CACHE_HOME/mqlab/<name>``, else ``~/.cache/mqlab/<name>``).

What is on disk is what is checked, every time before use: each jar keeps
Maven Central's SHA-1 beside it (``<jar>.sha1``), and a jar whose bytes no
longer match it (cut short, overwritten) is fetched again. A download goes to
a temporary file of its own (two runs fetching at once never share one), is
renamed over the jar once its SHA-1 matched, and the renamed file is hashed
again before it counts.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

MAVEN = "https://repo1.maven.org/maven2"

#: seconds one download may take
FETCH_TIMEOUT = 60.0
#: beside each cached jar: the SHA-1 Maven Central gave for it
SHA1_SUFFIX = ".sha1"
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Jar:
    group: str
    artifact: str
    version: str
    #: a platform build beside the plain jar, e.g. Netty's "linux-x86_64" native transport
    classifier: str = ""

    @property
    def file(self) -> str:
        tail = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact}-{self.version}{tail}.jar"

    @property
    def url(self) -> str:
        return f"{MAVEN}/{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.file}"


@dataclass(frozen=True, slots=True)
class JarSet:
    """A program's classpath: its jars, cached in one directory named ``name``."""

    name: str  # "kafka-3.9.2": the cache directory
    jars: tuple[Jar, ...]

    @property
    def cache_dir(self) -> Path:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(base) / "mqlab" / self.name

    def paths(self) -> list[Path]:
        return [self.cache_dir / jar.file for jar in self.jars]

    def classpath(self) -> str:
        return os.pathsep.join(str(p) for p in self.paths())

    def unchecked(self) -> list[Jar]:
        """The jars not on disk as Maven Central made them (missing, cut short, changed)."""
        return [jar for jar in self.jars if not intact(self.cache_dir / jar.file)]

    def fetch(self, say: Callable[[str], None] = lambda _: None) -> None:
        """Make every jar on disk match Maven Central's SHA-1, downloading what does not;
        OSError/ValueError with one line when it cannot."""
        for jar in self.unchecked():
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            path = self.cache_dir / jar.file
            expected = _remote_sha1(jar.url)
            if _sha1_of(path) == expected:  # a cache from before the SHA-1 was kept beside it
                _write_atomically(_sha1_path(path), expected.encode())
                continue
            say(f"fetching {jar.url}")
            download(jar.url, path, expected)


def jars(rows: Sequence[tuple[str, ...]]) -> tuple[Jar, ...]:
    return tuple(Jar(*row) for row in rows)


def _sha1_path(jar: Path) -> Path:
    return jar.with_name(jar.name + SHA1_SUFFIX)


def _sha1_of(path: Path) -> str | None:
    """The SHA-1 of the file's bytes now; None when it cannot be read."""
    digest = hashlib.sha1(usedforsecurity=False)
    try:
        with path.open("rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def intact(jar: Path) -> bool:
    """The jar on disk has the SHA-1 recorded beside it when it was fetched."""
    try:
        recorded = _sha1_path(jar).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return False
    return bool(recorded) and _sha1_of(jar) == recorded


def _remote_sha1(url: str) -> str:
    with urllib.request.urlopen(url + ".sha1", timeout=FETCH_TIMEOUT) as resp:
        body: bytes = resp.read(1024)
    words = body.decode("ascii", errors="replace").split()
    if not words or len(words[0]) != 40:
        raise ValueError(f"{url}.sha1: not a SHA-1")
    return words[0].lower()


def _write_atomically(path: Path, data: bytes) -> None:
    """``data`` in a temporary file of this process's own beside ``path``, renamed over it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def download(url: str, path: Path, expected: str | None = None) -> None:
    """One jar, kept under ``path`` only once its SHA-1 matched Maven Central's (``expected``,
    else fetched); the renamed file is hashed again, and its SHA-1 recorded beside it."""
    expected = expected or _remote_sha1(url)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        digest = hashlib.sha1(usedforsecurity=False)
        with os.fdopen(fd, "wb") as f:
            with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT) as resp:
                while chunk := resp.read(_CHUNK):
                    digest.update(chunk)
                    f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        if digest.hexdigest() != expected:
            raise ValueError(f"{url}: SHA-1 differs from Maven Central's; not kept")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if _sha1_of(path) != expected:  # what is on disk now is what counts
        raise ValueError(f"{path}: differs from Maven Central's SHA-1 after it was written")
    _write_atomically(_sha1_path(path), expected.encode())
