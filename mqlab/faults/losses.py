"""What the runner asks per step so that every message is accounted for and every loss
explains itself.

:class:`StepLosses` samples the broker's side of the step while it runs (RabbitMQ:
:mod:`mqlab.rabbitmq.flow`; any other server is said to offer nothing comparable),
gathers the workers' spontaneous events, and once the drain is over builds the step's
history (:mod:`mqlab.faults.history`), has the accountant put every expected delivery in
one bucket (:func:`mqlab.measure.account.account`) and explains it
(:mod:`mqlab.faults.explain`). Its :meth:`section` is the step's record's ``losses``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from mqlab import redact
from mqlab.faults import explain, history, verdict
from mqlab.measure.account import Account, Promise
from mqlab.measure.spontaneous import to_step
from mqlab.record.account import Account as AccountFigures
from mqlab.record.account import Count, Numbers
from mqlab.record.events import BrokerFlow, Spontaneous
from mqlab.record.figures import Figures
from mqlab.record.sections import Losses
from mqlab.record.values import Flag, Held
from mqlab.record.wire import from_wire

if TYPE_CHECKING:
    from mqlab.config.plan import Step
    from mqlab.rabbitmq.flow import FlowSampler, FlowTick
    from mqlab.rabbitmq.steps import BrokerSteps
    from mqlab.worker.pool import Worker

#: servers whose flow-control state mqlab cannot read, and why, in the step's words
NOTHING_COMPARABLE = {
    "nats": "NATS has no flow-control or alarm state to read: a slow consumer is cut off "
    "(the client reports it as an error) instead of the publisher being held",
    "redis": "Redis has no flow-control state to read: it buffers each client's output "
    "until client-output-buffer-limit closes the connection (an error, not a state)",
    "mosquitto": "Mosquitto has no flow-control state to read: it queues or drops QoS 0 "
    "messages per client without telling the publisher",
}


def not_measured(server: str | None) -> BrokerFlow:
    """A step's ``broker_flow`` when there is nothing to read: why, never a blank."""
    if server is None:
        why = "no broker: this driver is brokerless or in-process"
    elif server in NOTHING_COMPARABLE:
        why = NOTHING_COMPARABLE[server]
    elif server == "rabbitmq":
        why = "the RabbitMQ management API of this broker could not be reached"
    else:
        why = f"mqlab reads no flow-control state from {server}"
    return BrokerFlow(available=False, why=why)


def _plugin_facts(plugin: str, raw: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The plugin's server kind and the driver's options with the plugin's defaults filled
    (the note names a default, such as pika's 0.25 s TCP_USER_TIMEOUT, as the driver ran it)."""
    from mqlab import registry

    try:
        loaded = registry.get(plugin)
        return loaded.cls.features.server, loaded.check(raw)
    except Exception:  # noqa: BLE001 - a plugin that will not load fails the step elsewhere
        return None, dict(raw)


class StepLosses:
    """One step's broker sampling, spontaneous events, account and explanation."""

    def __init__(self, step: Step, broker_steps: BrokerSteps | None, broker_pid: int | None):
        self.step = step
        self.server, self.options = _plugin_facts(step.driver.plugin, step.driver.options_dict)
        self.broker_steps = broker_steps
        self.broker_pid = broker_pid
        self.ticks: list[FlowTick] = []
        self._task: asyncio.Task[None] | None = None
        self._sampler: FlowSampler | None = None
        plugin = step.driver.plugin
        self.promise: Promise | None = verdict.promise(
            self.options, verdict.declares_at_most_once(plugin)
        )
        self.no_promise = verdict.no_promise(self.options, plugin)

    def start(self, marker: str, t0: int) -> None:
        """Sample the broker's side once a second on the step's grid (from ``t0``)."""
        if self.server != "rabbitmq" or self.broker_steps is None or not self.broker_steps.ours:
            return
        from mqlab.rabbitmq.flow import FlowSampler, sample_from

        self._sampler = FlowSampler(self.broker_steps.api, marker, self.broker_pid)
        self._task = asyncio.create_task(sample_from(self._sampler, t0, self.ticks))

    async def stop(self) -> None:
        """After the drain: no more ticks."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def flow(self, window_start: int) -> BrokerFlow:
        """The step's ``broker_flow``: the figures, or why there are none."""
        if self._sampler is not None:
            from mqlab.rabbitmq.flow import figures

            return from_wire(BrokerFlow, figures(list(self.ticks), window_start))
        return not_measured(self.server)

    @staticmethod
    def live(workers: list[Worker], window_start: int) -> tuple[Spontaneous, ...]:
        """The spontaneous events the workers reported so far, for the live monitor."""
        evs = _scrubbed(ev for w in workers for ev in w.last.spontaneous)
        return _typed(to_step(evs, window_start)) if window_start else ()

    @staticmethod
    def events(workers: Sequence[Worker]) -> list[dict[str, Any]]:
        """Every spontaneous event the workers reported, their causes scrubbed."""
        return _scrubbed(ev for w in workers for ev in (w.final or w.last).spontaneous)

    def section(
        self,
        a: Account,
        said: history.StepHistory,
        figures: Figures,
        workers: list[Worker],
        window_start: int,
        first_s: int,
    ) -> tuple[Losses, tuple[Flag, ...]]:
        """The losses stage: ``spontaneous``, ``broker_flow``, ``attribution``, ``verdict``,
        ``at_loss``, the ``account``, and the flag whose message is the verdict's note."""
        figs = [w.final or w.last for w in workers]
        dropped = sum(f.spontaneous_dropped for f in figs)
        spontaneous = _typed(to_step(self.events(workers), window_start, dropped))
        flow = self.flow(window_start)
        if not a.expected:  # no receipts owed: nothing is lost by definition
            return Losses(spontaneous=spontaneous, broker_flow=flow), ()
        found = explain.explain(
            a, said.about, self.promise, self.no_promise, figures, spontaneous, flow, self.options,
            self.step.driver.plugin, first_s,
        )  # fmt: skip
        losses = Losses(
            spontaneous=spontaneous,
            broker_flow=flow,
            attribution=found.attribution,
            verdict=found.verdict,
            at_loss=found.at_loss,
            account=figures_of(a, said.history.slowest_ns),
        )
        return losses, (found.flag,) if found.flag is not None else ()


#: at most this many runs of numbers per bucket, cause, client and group in the record
MOST_RUNS = 50
#: at most this many (bucket, cause, client, group) entries of numbers in the record
MOST_ENTRIES = 200


def runs(bits: int, most: int = MOST_RUNS) -> tuple[str, int]:
    """The numbers of ``bits`` as runs, the lowest ``most`` runs ("9,19,200-249"), and how
    many numbers are left out."""
    out: list[str] = []
    at = 0
    while bits >> at and len(out) < most:
        rest = bits >> at
        lo = at + (rest & -rest).bit_length() - 1
        above = bits >> lo
        n = (~above & (above + 1)).bit_length() - 1  # the run's length: its low set bits
        out.append(str(lo) if n == 1 else f"{lo}-{lo + n - 1}")
        at = lo + n
    return ",".join(out), (bits >> at).bit_count()


def numbers_of(a: Account) -> tuple[Numbers, ...]:
    """Every bucket but delivered, by cause, client and group, as runs of numbers."""
    out: list[Numbers] = []
    for (group, client), slots in sorted(a.cells.items()):
        for (bucket, cause), bits in sorted(slots.items()):
            if bucket == "delivered" or not bits or len(out) >= MOST_ENTRIES:
                continue
            text, more = runs(bits)
            out.append(Numbers(
                bucket=bucket, cause=cause, group=group, client=client, numbers=text, more=more
            ))  # fmt: skip
    return tuple(out)


def figures_of(a: Account, slowest_ns: int | None = None) -> AccountFigures:
    """The account as the record holds it."""
    return AccountFigures(
        expected=a.expected,
        delivered=a.delivered,
        duplicated=a.duplicated,
        lost=a.lost,
        unexplained=a.unexplained_lost,
        held=a.held,
        still_queued=a.still_queued,
        unaccounted=a.unaccounted,
        held_by=tuple(Count(reason=r, messages=n) for r, n in a.held_by),
        unaccounted_why=tuple(Count(reason=r, messages=n) for r, n in a.unaccounted_why),
        slowest_ms=None if slowest_ns is None else round(slowest_ns / 1e6, 3),
        drain_end=a.drain_end,
        numbers=numbers_of(a),
    )


def held(a: Account, proxy_bytes: int | None) -> Held | None:
    """The step's ``held``: link faults still in force when the drain ended, what they held."""
    if not a.held_by:
        return None
    return Held(by=tuple(r for r, _ in a.held_by), messages=a.held, proxy_bytes=proxy_bytes)


def _typed(events: Sequence[dict[str, Any]]) -> tuple[Spontaneous, ...]:
    return tuple(from_wire(Spontaneous, e) for e in events)


def _scrubbed(evs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events with their causes scrubbed of the profile's passwords (a driver's words)."""
    return [{**ev, "cause": redact.scrub(str(ev["cause"]))} for ev in evs]
