"""What the runner asks per step so that every loss explains itself.

:class:`StepLosses` samples the broker's side of the step while it runs (RabbitMQ:
:mod:`mqlab.rabbitmq.flow`; any other server is said to offer nothing comparable),
gathers the workers' spontaneous events, and once the step is over attributes its
losses and duplicates (:mod:`mqlab.faults.attribution`) and explains them
(:mod:`mqlab.faults.explain`). Its :meth:`fields` go into the step's record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from mqlab import redact
from mqlab.faults import attribution, explain
from mqlab.measure.spontaneous import to_step

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


def not_measured(server: str | None) -> dict[str, Any]:
    """A step's ``broker_flow`` when there is nothing to read: why, never a blank."""
    if server is None:
        why = "no broker: this driver is brokerless or in-process"
    elif server in NOTHING_COMPARABLE:
        why = NOTHING_COMPARABLE[server]
    elif server == "rabbitmq":
        why = "the RabbitMQ management API of this broker could not be reached"
    else:
        why = f"mqlab reads no flow-control state from {server}"
    return {"available": False, "why": why}


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

    def flow(self, window_start: int) -> dict[str, Any]:
        """The step's ``broker_flow``: the figures, or why there are none."""
        if self._sampler is not None:
            from mqlab.rabbitmq.flow import figures

            return figures(list(self.ticks), window_start)
        return not_measured(self.server)

    @staticmethod
    def live(workers: list[Worker], window_start: int) -> list[dict[str, Any]]:
        """The spontaneous events the workers reported so far, for the live monitor."""
        evs = _scrubbed(ev for w in workers for ev in w.last.spontaneous)
        return to_step(evs, window_start) if window_start else []

    def fields(
        self,
        record: dict[str, Any],
        workers: list[Worker],
        ledger_dir: str,
        groups: int,
        sent_by_client: dict[int, int],
        window_start: int,
        first_s: int,
    ) -> dict[str, Any]:
        """``spontaneous``, ``broker_flow``, ``attribution``, ``verdict``, ``at_loss``."""
        figs = [w.final or w.last for w in workers]
        evs = _scrubbed(ev for f in figs for ev in f.spontaneous)
        dropped = sum(f.spontaneous_dropped for f in figs)
        out: dict[str, Any] = {"spontaneous": to_step(evs, window_start, dropped)}
        flow = self.flow(window_start)
        out["broker_flow"] = flow
        if not record.get("servers"):
            return out  # no receipts to count: nothing is lost by definition
        roles = {w.spec.worker: w.spec.role for w in workers}
        clients_of = {w.spec.worker: [c.client_id for c in w.spec.clients] for w in workers}
        marks = [m for w in workers if w.spec.clients for m in (w.final or w.last).send_marks]
        # a host lost mid-step is an event of the step like an injected one
        lost_hosts = [
            {"t_s": e["t_s"], "action": attribution.HOST_LOST, "detail": f"host {e['host']} lost"}
            for e in (record.get("hosts") or {}).get("events") or ()
        ]
        cands = attribution.candidates(
            evs, [*(record.get("events") or []), *lost_hosts], roles, clients_of, marks,
            sent_by_client, window_start,
        )  # fmt: skip
        causes = [_cause(c, evs) for c in cands]
        lost, none, dups, dup_none = attribution.attribute(
            cands, ledger_dir, groups, sent_by_client, record["unaccounted"], record["duplicates"]
        )
        step = self.step
        told = {**record, **out}
        found = explain.explain(
            told, cands, causes, lost, none, dups, dup_none, flow, self.options,
            step.driver.plugin, first_s, window_start,
        )  # fmt: skip
        flag = found.pop("flag", None)
        out.update(found)
        if flag is not None:
            out["flags"] = [*record.get("flags", []), flag]
        return out


def _scrubbed(evs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events with their causes scrubbed of the profile's passwords (a driver's words)."""
    return [{**ev, "cause": redact.scrub(str(ev["cause"]))} for ev in evs]


def _cause(c: attribution.Candidate, evs: list[dict[str, Any]]) -> str:
    for ev in evs:
        if ev["t_ns"] == c.t_ns and ev["worker"] == c.worker and ev["kind"] == c.kind:
            return str(ev["cause"])
    return c.label
