"""Jars from Maven Central, checked against its SHA-1 files, cached under ``~/.cache/mqlab``.

A Java program mqlab runs (a managed Kafka broker) is a pinned list of jars:
the artifact and every library its start-up loads, as ``mvn
dependency:list -DincludeScope=runtime`` resolved them once. Pinning the list,
rather than resolving at run time, needs no Maven on the machine and gives the
same classpath everywhere. A jar is downloaded once into its cache directory
(``$XDG_CACHE_HOME/mqlab/<name>``, else ``~/.cache/mqlab/<name>``), written
under a temporary name and renamed once its SHA-1 matched, so a cut download
is never taken for a jar.
"""

from __future__ import annotations

import hashlib
import os
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

MAVEN = "https://repo1.maven.org/maven2"

#: seconds one download may take
FETCH_TIMEOUT = 60.0


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

    def missing(self) -> list[Jar]:
        return [jar for jar in self.jars if not (self.cache_dir / jar.file).is_file()]

    def fetch(self, say: Callable[[str], None] = lambda _: None) -> None:
        """Download what is missing; OSError/ValueError with one line when it cannot."""
        missing = self.missing()
        if not missing:
            return
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        for jar in missing:
            say(f"fetching {jar.url}")
            download(jar.url, self.cache_dir / jar.file)


def jars(rows: Sequence[tuple[str, ...]]) -> tuple[Jar, ...]:
    return tuple(Jar(*row) for row in rows)


def download(url: str, path: Path) -> None:
    """One jar, kept under ``path`` only once its SHA-1 matched Maven Central's."""
    with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT) as resp:
        data = resp.read()
    with urllib.request.urlopen(url + ".sha1", timeout=FETCH_TIMEOUT) as resp:
        expected = resp.read().decode().split()[0].strip()
    if hashlib.sha1(data, usedforsecurity=False).hexdigest() != expected:
        raise ValueError(f"{url}: SHA-1 differs from Maven Central's; not kept")
    tmp = path.with_name(path.name + ".part")
    tmp.write_bytes(data)
    tmp.replace(path)
