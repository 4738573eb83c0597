"""Known-answer cases: steps whose right account is known exactly, and the check that a run
found it (the suite's known-answer tests and ``mqlab selftest``).

One client casts 100 messages a second from the window's start, so message n is sent
n / 100 s into the window, and the plugin's servers are wrapped
(:mod:`mqlab.faults.knownanswer`) to drop, duplicate and delay chosen numbers silently.
Each case is one step: the wrapped plugin alone, or with one event (a server killed and
restarted, a link cut held to the end, a 200 ms delay, a broker node killed and started
again, flow control by a memory alarm) fired at 2 s and undone at 3 s, with drops chosen
before it (0.1 to 0.5 s), during it (2.2 to 2.6 s) and after it (well after it ended and
was noticed). The right account:

- a drop before an event, or after it ended, or during one that only holds traffic (a
  delay, flow control), or with no event at all: ``lost`` with no event (unexplained);
- a drop during an event that can lose messages (or during a cut never undone: every
  drop from its start): not delivered and not unexplained: lost to that event, to a send
  the driver refused meanwhile, or held by the fault;
- a duplicate (0.6 s): ``duplicated`` with no event; a delay (0.7 s): ``delivered``.

:func:`check` compares a step's record (its account's numbers) with that, exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mqlab.faults.knownanswer import chosen
from mqlab.record.step import StepRecord

__all__ = ["CASES", "PLUGINS", "RATE", "Case", "Found", "check", "profile", "register"]

#: messages a second, one client
RATE = 100
DUPLICATE = "60-64"
DELAY = "70-74"
BEFORE = "10-50%10"
DURING = "220-260%10"
#: how finely the marks date a message, and a mark's slack
MARKS_S = 0.15


@dataclass(frozen=True, slots=True)
class Case:
    """One kind of step: its events (TOML inline tables), whether the event can lose what is
    sent during it, the drops chosen after it (None: it is never undone), the window."""

    name: str
    events: tuple[str, ...] = ()
    loses: bool = False
    after: str | None = "600-640%10"
    duration: str = "6.6s"  # the window it needs at least
    broker: bool = False  # it needs a managed RabbitMQ node (node kill, flow control)

    @property
    def drops(self) -> str:
        return ",".join(p for p in (BEFORE, DURING if self.events else "", self.after) if p)


def _event(at: str, action: str, where: str) -> str:
    return f'{{ at = "{at}", action = "{action}", {where} }}'


_SERVER, _NODE = "server = 1", 'node = "node1"'
CASES: Mapping[str, Case] = {
    "alone": Case("alone"),
    "kill_server": Case(
        "kill_server",
        (_event("2s", "kill_server", _SERVER), _event("2.5s", "restart_server", _SERVER)),
        loses=True,
    ),
    "cut": Case("cut held to the end", (_event("2s", "cut", _NODE),), loses=True, after=None),
    "delay": Case(
        "delay", (_event("2s", "delay", f"{_NODE}, ms = 200"), _event("3s", "restore", _NODE))
    ),
    "node_kill": Case(
        "node kill",
        (_event("2s", "kill_node", _NODE), _event("3s", "start_node", _NODE)),
        loses=True,
        after="1200-1240%10",
        duration="13s",
        broker=True,
    ),
    "flow_control": Case(
        "flow control",
        (
            _event("2s", "memory_alarm", f"{_NODE}, on = true"),
            _event("3s", "memory_alarm", f"{_NODE}, on = false"),
        ),
        broker=True,
    ),
}
#: each plugin wrapped, and the cases it can run (a link fault needs a broker URL to proxy;
#: a node kill and flow control a managed RabbitMQ)
PLUGINS: Mapping[str, tuple[str, ...]] = {
    "loopback": ("alone",),
    "pika": ("alone", "kill_server", "cut", "delay", "node_kill", "flow_control"),
    "zmq": ("alone", "kill_server"),
    "redis-streams": ("alone", "kill_server", "cut", "delay"),
    "nats": ("alone", "kill_server", "cut", "delay"),
}


def register(site: Path) -> Path:
    """A site directory whose distribution registers every plugin of :data:`PLUGINS` wrapped
    (``known-pika = mqlab.faults.knownanswer:pika``): on a run's ``PYTHONPATH``, its
    workers find them as they find any installed plugin."""
    info = site / "mqlab_known_answer-0.0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: mqlab-known-answer\nVersion: 0.0.1\n"
    )
    points = "".join(
        f"known-{p} = mqlab.faults.knownanswer:{p.replace('-', '_')}\n" for p in PLUGINS
    )
    (info / "entry_points.txt").write_text(f"[mqlab.transports]\n{points}")
    return site


def profile(plugin: str, cases: Sequence[str], head: str, url: str, topic: str) -> str:
    """A profile running ``cases`` of ``plugin`` wrapped (``known-<plugin>``), one step
    each, for the longest window they need; ``head``: tables after ``[run]`` (``[broker]``),
    ``url``: the driver's ``url = ...`` line, or ""."""
    duration = max(float(CASES[c].duration.rstrip("s")) for c in cases)
    out = [
        f'[run]\nname = "known answers: {plugin}"\nduration = "{duration:g}s"\n'
        f'warmup = "0s"\ndrain = "20s"\nprocesses = 1\n{head}'
    ]
    url_line = f"{url.strip()}\n" if url else ""
    for name in cases:
        case = CASES[name]
        out.append(
            f'[drivers.{name}]\nplugin = "known-{plugin}"\n{url_line}'
            f'silent_drop = "{case.drops}"\nsilent_duplicate = "{DUPLICATE}"\n'
            f'silent_delay = "{DELAY}"\n'
        )
    for name in cases:
        case = CASES[name]
        events = "".join(
            f"[[scenario.event]]\n{_table(e)}" for e in case.events
        )  # fmt: skip
        out.append(
            f'[[scenario]]\nname = "{name}"\ndrivers = ["{name}"]\npattern = "cast"\n'
            f"rate = {RATE}\nservers = 2\n"
            f'exchange = "{topic}"\ntopic = "{topic}_{name}"\n{events}'
        )
    return "\n".join(out)


def _table(inline: str) -> str:
    """An inline TOML table's keys, one a line."""
    return "".join(f"{part.strip()}\n" for part in inline.strip("{} ").split(", "))


@dataclass(frozen=True, slots=True)
class Found:
    """One case: what its account must be, what the run's was, and whether they agree."""

    case: str
    expected: str
    found: str
    ok: bool


def _numbers(text: str) -> set[int]:
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _spelled(numbers: set[int]) -> str:
    if not numbers:
        return "none"
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and runs[-1][1] == n - 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def check(name: str, step: StepRecord) -> Found:
    """Whether ``step``'s account is case ``name``'s known answer, exactly."""
    case = CASES[name]
    before, during = chosen(BEFORE), chosen(DURING) if case.events else frozenset()
    after = set(chosen(case.after)) if case.after else set()
    held_to_end = case.events and case.after is None
    either: set[int] = set()
    if case.loses and after:
        # a drop sent before the event was undone and noticed (its undoing's own time, as
        # the effector took it, plus the time the series showed it took to notice, or 1 s)
        # is still the event's: the known answer for a slow undoing
        fired = [e for e in step.figures.events or () if e.planned_s is not None]
        over = max((e.t_s or 0.0) + (e.took_s or 0.0) for e in fired)
        noticed = [f.detect_s for f in step.figures.faults or () if f.detect_s is not None]
        edge = over + (noticed[0] if noticed else 1.0)
        # a message sent within a mark's spacing of that edge may be dated on either side
        either = {n for n in after if abs(n / RATE - edge) < MARKS_S}
        during = during | {n for n in after - either if n / RATE < edge}
        after -= during | either
    if case.loses:
        # the event's window opens the step's slowest delivery before it (the account says
        # how slow: on a loaded machine the first deliveries can take a second or more): a
        # drop sent after that may be the event's as well
        fired = [e for e in step.figures.events or () if e.planned_s is not None]
        account = step.losses.account
        slack = (account.slowest_ms or 0.0) / 1000 if account is not None else 0.0
        start = min(((e.t_s or 0.0) for e in fired), default=None)
        if start is not None:
            either |= {n for n in before if n / RATE >= start - slack - MARKS_S}
    unexplained = (set(before) - either) | after
    if not case.loses:
        unexplained |= during
    explained = set(during) if case.loses else set()
    twice, late = chosen(DUPLICATE), chosen(DELAY)
    where: dict[tuple[str, str], set[int]] = {}
    account = step.losses.account
    for n in account.numbers if account is not None else ():
        if n.client == 1 and n.group == 0:
            where.setdefault((n.bucket, n.cause), set()).update(_numbers(n.numbers))
    lost = where.get(("lost", ""), set()) - either
    repeated = where.get(("duplicated", ""), set())
    missing = set().union(*(v for k, v in where.items() if k[0] != "duplicated"), set())
    caused = missing - lost
    expected = [
        f"lost with no event: {_spelled(unexplained)}",
        f"duplicated with no event: {_spelled(set(twice))}",
        f"delivered late: {_spelled(set(late))}",
    ]
    if explained:
        what = "held or lost to the cut" if held_to_end else "lost to the event or its failures"
        expected.insert(1, f"{what}: {_spelled(explained)}")
    if either:
        expected.insert(2, f"either (sent at the event's edge): {_spelled(either)}")
    found = [
        f"lost with no event: {_spelled(lost)}",
        f"duplicated with no event: {_spelled(repeated & set(twice))}"
        + (f" (and {_spelled(repeated - set(twice))})" if repeated - set(twice) else ""),
        f"delivered late: {_spelled(set(late) - missing)}",
    ]
    if explained:
        causes = sorted({c or "unexplained" for (b, c), v in where.items() if v & explained})
        found.insert(1, f"explained: {_spelled(caused & explained)} ({'; '.join(causes)})")
    found += [
        f"{b} ({c or 'unexplained'}): {_spelled(v - explained)}"
        for (b, c), v in sorted(where.items())
        if b != "duplicated" and (b, c) != ("lost", "") and v - explained
    ]  # the rest: what no chosen number explains (an event's own losses, a queue's)
    ok = (
        lost == unexplained
        and explained <= caused
        and repeated == set(twice)
        and not late & missing
        and either <= missing
        and step.figures.status == "done"
    )
    return Found(case.name, "; ".join(expected), "; ".join(found), ok)
