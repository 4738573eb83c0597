"""``mqlab ceiling``: each cast step beside its library's ceiling and the broker's.

Right after a plugin's cast step, on the same server, with the same message
size and acknowledgement mode, mqlab runs the plugin's reference loop (the
thinnest use of its library: :mod:`mqlab.sdk.reference`) and, for a RabbitMQ
driver, RabbitMQ PerfTest (:mod:`mqlab.ceiling.perftest`). The step's record gets a
``ceiling`` section: both rates and the plugin's throughput as a percentage of
each. A step that is not a plain cast (call, notify, fanout, mixed, rolling)
has no ceiling: there is no reference loop for it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from importlib import metadata
from typing import Any

from rich.table import Table

from mqlab import redact
from mqlab.ceiling import perftest, refloop, share
from mqlab.codec import Codec
from mqlab.config.cores import Cores
from mqlab.config.plan import Step
from mqlab.config.sizes import SizeSpec
from mqlab.errors import PluginError
from mqlab.live import markdown as md
from mqlab.live.cells import trust_note
from mqlab.record.figures import Figures
from mqlab.record.sections import Ceiling
from mqlab.record.step import StepRecord
from mqlab.record.wire import from_wire
from mqlab.sdk import reference
from mqlab.sdk.reference import ReferenceSpec


def applies(step: Step) -> bool:
    """A ceiling exists for a plain cast step: one driver, no fanout, no update."""
    sc = step.scenario
    return (
        sc.pattern == "cast"
        and not sc.fanout
        and step.clients_driver is None
        and step.rolling_to is None
    )


def body_size(step: Step) -> int:
    """The plugin's encoded message length for this step (a distribution: its mean)."""
    sc = step.scenario
    codec = Codec(sc.serializer, sc.envelope)
    return len(codec.encode(0, 0, time.monotonic_ns(), _mean(sc.message_size)))


def _mean(size: SizeSpec) -> int:
    if size.fixed is not None:
        return size.fixed
    total = sum(w for _, _, w in size.bins)
    return round(sum((lo + hi) / 2 * w for lo, hi, w in size.bins) / total)


def _percent(rate: float | None, ceiling: float | None) -> float | None:
    if rate is None or not ceiling:
        return None
    return round(100.0 * rate / ceiling, 1)


class Ceilings:
    """The runner's after-step hook: measures and attaches each cast step's ceiling."""

    def __init__(
        self,
        urls: Mapping[str, tuple[str, ...]],
        options: Mapping[str, Mapping[str, Any]],
        servers: Mapping[str, str | None],
        warmup: float,
        duration: float,
        placement: Cores | None = None,
    ) -> None:
        #: the loops run on the CPUs the plugin's workers had: consumer as servers, publisher
        #: as clients, PerfTest (one JVM, both) on both sets
        self.placement = placement
        self.urls = urls  # driver name -> the URLs its step used
        self.options = options  # driver name -> its checked options, defaults filled
        self.servers = servers  # driver name -> the managed server kind ("rabbitmq", None)
        self.run = (warmup, duration)  # the profile's, as the plugin's step had them

    async def __call__(self, step: Step, figures: Figures) -> Ceiling | None:
        """The ceiling stage: a plain cast step's ceilings, measured right after it."""
        if not applies(step) or figures.status != "done":
            return None
        ceiling = await self.measure(step, figures.throughput.mean)
        # mqlab's own share: the step's CPU per message beside the loop's
        ceiling["cpu_us"] = mine = share.step_cpu_us(figures)
        ceiling["mqlab_share"] = share.mqlab_share(mine, ceiling.get("loop_cpu_us") or {})
        return from_wire(Ceiling, ceiling)

    async def measure(self, step: Step, plugin_rate: float | None) -> dict[str, Any]:
        run = self.run
        driver = step.driver
        urls, options = self.urls[driver.name], self.options[driver.name]
        size = body_size(step)
        out: dict[str, Any] = {"size": size}
        try:
            cls = reference.load(driver.plugin)
        except PluginError as exc:
            out.update(library=None, mode=None, rate=None, percent=None, error=str(exc))
            cls = None
        if cls is not None:
            out.update(library=_version_of(cls.library), mode=cls.describe(options))
            out["confirms"] = cls.confirms(options)
            name = f"mqlab-ceiling-{uuid.uuid4().hex[:10]}"
            spec = ReferenceSpec(urls, name, size, options, concurrency=step.concurrency or 0)
            try:
                got = await refloop.measure(driver.plugin, spec, run[0], run[1], self.placement)
                out.update(rate=round(got.received_per_s, 1), error=None)
                out["sent_rate"] = round(got.sent_per_s, 1)
                out["loop_cpu_us"] = {
                    "publisher": got.publisher_cpu_us,
                    "consumer": got.consumer_cpu_us,
                }
            except refloop.LoopFailed as exc:
                # a library's message may echo the URL: never its password
                out.update(rate=None, error=redact.scrub(str(exc)))
            out["percent"] = _percent(plugin_rate, out["rate"])
        out["perftest"] = None
        if self.servers.get(driver.name) == "rabbitmq":
            auto_ack = cls.auto_ack(options) if cls is not None else False
            cpus = self.placement.of("both") if self.placement is not None else ()
            out["perftest"] = await _perftest(
                urls[0], size, auto_ack, int(options.get("prefetch") or 0), run, plugin_rate, cpus
            )
        return out


async def _perftest(
    url: str,
    size: int,
    auto_ack: bool,
    prefetch: int,
    run: tuple[float, float],
    plugin_rate: float | None,
    cpus: tuple[int, ...] = (),
) -> dict[str, Any]:
    try:
        got = await perftest.run(url, size, auto_ack, prefetch, run[0], run[1], cpus)
    except perftest.Unavailable as exc:
        missing = redact.scrub(str(exc))
        return {"version": None, "rate": None, "percent": None, "missing": missing}
    return {
        "version": got.version,
        "rate": round(got.received_per_s, 1),
        "percent": _percent(plugin_rate, got.received_per_s),
        "command": got.command,
        "missing": None,
    }


def _version_of(dist: str) -> str:
    try:
        return f"{dist} {metadata.version(dist)}"
    except metadata.PackageNotFoundError:
        return dist


# -- showing it ------------------------------------------------------------------


def _num(v: Any) -> str:
    return f"{v:,.0f}" if isinstance(v, int | float) else "-"


def _pct(v: Any) -> str:
    return f"{v:.0f} %" if isinstance(v, int | float) else "-"


def _cpu(a: Any, b: Any) -> str:
    """Client + server (or publisher + consumer) CPU per message, µs."""
    if not isinstance(a, int | float):
        return "-"
    return f"{a:.1f} + {b:.1f}" if isinstance(b, int | float) else f"{a:.1f}"


_COLUMNS = (
    ("#", "right"), ("driver", "left"), ("bytes", "right"), ("msg/s", "right"),
    ("library loop", "left"), ("loop msg/s", "right"), ("% of loop", "right"),
    ("µs/msg c+s", "right"), ("loop µs p+c", "right"), ("mqlab share", "right"),
    ("PerfTest msg/s", "right"), ("% of PerfTest", "right"),
)  # fmt: skip
TITLE = "ceilings (cast, same broker, size and ack mode)"


def _rows(steps: Iterable[StepRecord]) -> list[list[str]]:
    rows = []
    for s in steps:
        c = s.ceiling
        if c is None:
            continue
        pt = c.perftest
        loop = f"{c.library} ({c.mode})" if c.library else "-"
        mine, bare = c.cpu_us, c.loop_cpu_us
        rows.append([
            str(s.step + 1), s.cell.driver, f"{c.size:,}", _num(s.figures.throughput.mean),
            loop, _num(c.rate), _pct(c.percent),
            _cpu(mine.client, mine.server) if mine else "-",
            _cpu(bare.publisher, bare.consumer) if bare else "-", _pct(c.mqlab_share),
            _num(pt.rate if pt else None), _pct(pt.percent if pt else None),
        ])  # fmt: skip
    return rows


def table(steps: Iterable[StepRecord]) -> Table | None:
    """The ceiling table: plugin msg/s, its library's loop, PerfTest; None if no step has one."""
    rows = _rows(steps)
    if not rows:
        return None
    t = Table(title=TITLE, title_justify="left")
    for col, just in _COLUMNS:
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for row in rows:
        t.add_row(*row)
    return t


def markdown(steps: Iterable[StepRecord]) -> str:
    """The same table in Markdown, with its notes, for publishing (`mqlab show --markdown`)."""
    steps = list(steps)
    head = "| " + " | ".join(c for c, _ in _COLUMNS) + " |"
    rule = "|" + "|".join("---:" if j == "right" else "---" for _, j in _COLUMNS) + "|"
    body = [md.row(r) for r in _rows(steps)]
    notes_ = "".join(f"\n\n{md.text(line)}" for line in notes(steps))
    return "\n".join([TITLE, "", head, rule, *body]) + notes_


def notes(steps: Iterable[StepRecord]) -> list[str]:
    """One line per thing the table cannot say: a loop that failed, a plugin that waited
    for confirms, PerfTest missing, a step measured on a contended machine or unstable
    (its loop and PerfTest ran right after it, on the same machine)."""
    lines: list[str] = []
    seen: set[str] = set()
    for s in steps:
        c = s.ceiling
        if c is None:
            continue
        where = f"step {s.step + 1} ({s.cell.driver})"
        if trusted := trust_note(s.trust):
            lines.append(f"{where}: {trusted}")
        if c.error:
            lines.append(f"{where}: reference loop: {c.error}")
        if c.confirms:
            lines.append(
                f"{where}: each cast waited for a publisher confirm "
                f"({c.confirms}); the loop and PerfTest publish without"
            )
        pt = c.perftest
        line = pt and (pt.missing or (pt.version and f"broker ceiling: {pt.version}"))
        if line and line not in seen:
            seen.add(line)
            lines.append(line)
    return lines
