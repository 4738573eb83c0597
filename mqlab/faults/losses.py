"""What the runner asks per step so that every loss explains itself.

:class:`StepLosses` samples the broker's side of the step while it runs (RabbitMQ:
:mod:`mqlab.rabbitmq.flow`; any other server is said to offer nothing comparable),
gathers the workers' spontaneous events, and once the step is over attributes its
losses and duplicates (:mod:`mqlab.faults.attribution`) and explains them
(:mod:`mqlab.faults.explain`). Its :meth:`section` is the step's record's ``losses``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from mqlab import redact
from mqlab.faults import attribution, explain
from mqlab.measure.spontaneous import to_step
from mqlab.record.events import BrokerFlow, Event, Spontaneous
from mqlab.record.figures import Figures
from mqlab.record.sections import Hosts, Losses
from mqlab.record.values import Flag
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
    """One step's broker sampling, spontaneous events and attribution."""

    def __init__(self, step: Step, broker_steps: BrokerSteps | None, broker_pid: int | None):
        self.step = step
        self.server, self.options = _plugin_facts(step.driver.plugin, step.driver.options_dict)
        self.broker_steps = broker_steps
        self.broker_pid = broker_pid
        self.ticks: list[FlowTick] = []
        self._task: asyncio.Task[None] | None = None
        self._sampler: FlowSampler | None = None

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

    def section(
        self,
        figures: Figures,
        servers: int,
        hosts: Hosts | None,
        workers: list[Worker],
        ledger_dir: str,
        groups: int,
        sent_by_client: dict[int, int],
        window_start: int,
        first_s: int,
    ) -> tuple[Losses, tuple[Flag, ...]]:
        """The losses stage: ``spontaneous``, ``broker_flow``, ``attribution``, ``verdict``,
        ``at_loss``, and the flag whose message is the verdict's note."""
        figs = [w.final or w.last for w in workers]
        evs = _scrubbed(ev for f in figs for ev in f.spontaneous)
        dropped = sum(f.spontaneous_dropped for f in figs)
        spontaneous = _typed(to_step(evs, window_start, dropped))
        flow = self.flow(window_start)
        if not servers:  # no receipts to count: nothing is lost by definition
            return Losses(spontaneous=spontaneous, broker_flow=flow), ()
        roles = {w.spec.worker: w.spec.role for w in workers}
        clients_of = {w.spec.worker: [c.client_id for c in w.spec.clients] for w in workers}
        marks = [m for w in workers if w.spec.clients for m in (w.final or w.last).send_marks]
        # a host lost mid-step is an event of the step like an injected one
        lost_hosts = [
            Event(t_s=e.t_s, action=attribution.HOST_LOST, detail=f"host {e.host} lost")
            for e in (hosts.events if hosts is not None else ())
        ]
        cands = attribution.candidates(
            evs, [*(figures.events or ()), *lost_hosts], roles, clients_of, marks,
            sent_by_client, window_start,
        )  # fmt: skip
        causes = [_cause(c, evs) for c in cands]
        lost, none, dups, dup_none = attribution.attribute(
            cands, ledger_dir, groups, sent_by_client, figures.unaccounted or 0,
            figures.duplicates or 0,
        )  # fmt: skip
        found = explain.explain(
            figures, spontaneous, cands, causes, lost, none, dups, dup_none, flow, self.options,
            self.step.driver.plugin, first_s, window_start,
        )  # fmt: skip
        losses = Losses(
            spontaneous=spontaneous,
            broker_flow=flow,
            attribution=found.attribution,
            verdict=found.verdict,
            at_loss=found.at_loss,
        )
        return losses, (found.flag,) if found.flag is not None else ()


def _typed(events: Sequence[dict[str, Any]]) -> tuple[Spontaneous, ...]:
    return tuple(from_wire(Spontaneous, e) for e in events)


def _scrubbed(evs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events with their causes scrubbed of the profile's passwords (a driver's words)."""
    return [{**ev, "cause": redact.scrub(str(ev["cause"]))} for ev in evs]


def _cause(c: attribution.Candidate, evs: list[dict[str, Any]]) -> str:
    for ev in evs:
        if ev["t_ns"] == c.t_ns and ev["worker"] == c.worker and ev["kind"] == c.kind:
            return str(ev["cause"])
    return c.label
