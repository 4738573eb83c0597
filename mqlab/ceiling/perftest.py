"""RabbitMQ PerfTest: the broker's own ceiling, for the same size and ack mode.

PerfTest is RabbitMQ's Java load generator. Its jar on Maven Central is not
self-contained, so :func:`fetch` downloads it with the libraries it loads
(checked against Maven Central's SHA-1 files) into a cache directory,
``$XDG_CACHE_HOME/mqlab/perftest-<version>`` (``~/.cache/...``).
``scripts/setup.sh`` runs ``python -m mqlab.ceiling.perftest`` where Java is
installed; ``mqlab ceiling`` fetches it on first use too. Without Java, or
without the jars and no network, :func:`run` says so in one line.

One run: one producer, one consumer (``-x 1 -y 1``), the message size ``-s``,
``-a`` (auto-ack) when the plugin consumes without acks, else the plugin's
prefetch as ``-q``; the rate is the mean of PerfTest's per-second "received"
figures after the warm-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from mqlab import maven
from mqlab.sdk.urls import mask

VERSION = "2.22.1"
MAIN = "com.rabbitmq.perf.PerfTest"

#: (group, artifact, version): PerfTest and every library its start-up loads
JARS: tuple[tuple[str, str, str], ...] = (
    ("com.rabbitmq", "perf-test", VERSION),
    ("com.rabbitmq", "amqp-client", "5.23.0"),
    ("org.slf4j", "slf4j-api", "2.0.16"),
    ("ch.qos.logback", "logback-classic", "1.3.14"),
    ("ch.qos.logback", "logback-core", "1.3.14"),
    ("commons-cli", "commons-cli", "1.9.0"),
    ("io.dropwizard.metrics", "metrics-core", "4.2.28"),
    ("io.micrometer", "micrometer-core", "1.14.1"),
    ("io.micrometer", "micrometer-commons", "1.14.1"),
    ("io.micrometer", "micrometer-observation", "1.14.1"),
    ("io.micrometer", "micrometer-registry-prometheus", "1.14.1"),
    ("io.micrometer", "micrometer-registry-jmx", "1.14.1"),
    ("io.micrometer", "micrometer-registry-datadog", "1.14.1"),
    ("io.dropwizard.metrics", "metrics-jmx", "4.2.28"),
    ("io.prometheus", "prometheus-metrics-core", "1.3.3"),
    ("io.prometheus", "prometheus-metrics-model", "1.3.3"),
    ("io.prometheus", "prometheus-metrics-config", "1.3.3"),
    ("io.prometheus", "prometheus-metrics-tracer-common", "1.3.3"),
    ("com.google.code.gson", "gson", "2.11.0"),
)

#: seconds PerfTest may take beyond its own time limit (JVM start, connection)
RUN_SLACK = 30.0

_PER_SECOND = re.compile(r"time (\d+(?:\.\d+)?) s, sent: (\d+) msg/s, received: (\d+) msg/s")
_AVERAGE = re.compile(r"receiving rate avg: (\d+) msg/s")


class Unavailable(Exception):
    """PerfTest cannot run here; the message is the one line to show."""


@dataclass(frozen=True, slots=True)
class Measured:
    received_per_s: float
    version: str  # "PerfTest 2.22.1 (Java 17.0.15)"
    command: str  # what ran, password masked


#: the jars as :mod:`mqlab.maven` caches and checks them
JAR_SET = maven.JarSet(f"perftest-{VERSION}", maven.jars(JARS))


def cache_dir() -> Path:
    return JAR_SET.cache_dir


def fetch(say: Callable[[str], None] = lambda _: None) -> None:
    """Make every jar on disk match Maven Central's SHA-1, downloading what does not;
    OSError/ValueError with one line when it cannot."""
    JAR_SET.fetch(say)


def java_url(url: str) -> str:
    """An AMQP URL as the Java client reads it: its path is the vhost, ``/`` is the default.

    Python clients read ``amqp://host/`` as vhost ``/``; the Java client as vhost ``""``.
    """
    parts = urlsplit(url)
    if parts.path in ("", "/"):
        return urlunsplit((parts.scheme, parts.netloc, "", parts.query, ""))
    return url


def command(url: str, size: int, auto_ack: bool, prefetch: int, seconds: int) -> list[str]:
    """The PerfTest command line: java is found on PATH."""
    java = shutil.which("java")
    if java is None:
        raise Unavailable("no Java on PATH: PerfTest (the broker's own ceiling) not run")
    args = [java, "-cp", JAR_SET.classpath(), MAIN, "-h", java_url(url), "-x", "1", "-y", "1"]
    args += ["-s", str(size), "-z", str(seconds)]
    if auto_ack:
        args.append("-a")
    elif prefetch:
        args += ["-q", str(prefetch)]
    return args


async def run(
    url: str,
    size: int,
    auto_ack: bool,
    prefetch: int,
    warmup: float,
    duration: float,
    cpus: tuple[int, ...] = (),
) -> Measured:
    """One PerfTest run; :class:`Unavailable` with one line when it cannot run.

    ``cpus``: the JVM runs on these only (``taskset``, so that no thread it starts
    escapes: a JVM has threads before a pin from outside could reach them).
    """
    seconds = max(1, round(warmup + duration))
    args = command(url, size, auto_ack, prefetch, seconds)
    pinned = ["taskset", "-c", ",".join(map(str, cpus))] if cpus else []
    try:  # every jar checked on disk, a cut or changed one fetched again
        await asyncio.to_thread(fetch)
    except (OSError, ValueError) as exc:
        raise Unavailable(f"PerfTest {VERSION} could not be fetched: {exc}") from None
    proc = await asyncio.create_subprocess_exec(
        *pinned, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), seconds + RUN_SLACK)
    except TimeoutError:
        raise Unavailable(f"PerfTest did not finish within {seconds + RUN_SLACK:g}s") from None
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
    text = out.decode(errors="replace")
    rate = received_rate(text, warmup)
    if rate is None:
        last = [ln for ln in text.splitlines() if ln.strip()][-1:] or ["no output"]
        raise Unavailable(f"PerfTest measured nothing: {last[0][:200]}")
    shown = " ".join(args[3:]).replace(java_url(url), _masked(url))
    return Measured(rate, f"PerfTest {VERSION} (Java {await _java_version(args[0])})", shown)


def received_rate(text: str, warmup: float) -> float | None:
    """Mean of the per-second received rates after ``warmup``; else PerfTest's average."""
    seconds = [(float(t), int(r)) for t, _, r in _PER_SECOND.findall(text)]
    after = [r for t, r in seconds if t > warmup + 0.5]
    if after:
        return sum(after) / len(after)
    avg = _AVERAGE.search(text)
    return float(avg.group(1)) if avg else None


def _masked(url: str) -> str:
    return mask(java_url(url))


async def _java_version(java: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        java, "-version", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await proc.communicate()
    found = re.search(r'version "([^"]+)"', out.decode(errors="replace"))
    return found.group(1) if found else "unknown"


if __name__ == "__main__":  # scripts/setup.sh: fetch once, where Java is
    try:
        fetch(lambda line: print(line, file=sys.stderr))
    except (OSError, ValueError) as exc:
        print(f"mqlab.ceiling.perftest: {exc}", file=sys.stderr)
        sys.exit(1)
    print(f"PerfTest {VERSION}: {cache_dir()}")
