"""One plugin's client alone: CPU per cast, and how much of it is the plugin's own code.

    .venv/bin/python scripts/cast_cost.py PLUGIN BROKER_URL [seconds]
    .venv/bin/py-spy record -r 300 -f raw -o cast.raw -- \
        .venv/bin/python scripts/cast_cost.py kombu amqp://guest:guest@127.0.0.1:5672/

25 concurrent casters send 200-byte casts through one transport, in the plugin's fastest
honest setting (the ceiling profile's: no confirms, no acks, pre-settled AMQP 1.0 casts),
to a topic nobody consumes: the exchange drops them, so the broker does little and the
client is the one saturated. Prints the casts per second and the process's CPU time per
cast. Under py-spy, the share of samples in ``mqlab_<plugin>`` frames is the plugin's own
cost; the rest is its library's (and asyncio's). To compare two trees, run it from each
with ``PYTHONPATH`` naming that tree and its plugin directory.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import uvloop

from mqlab import registry
from mqlab.config.profile import load_profile
from mqlab.transport import Target, TransportConfig

#: each plugin's fastest honest setting is the ceiling profile's driver of that plugin
#: (pika's there is not mandatory: here nobody consumes, and a returned cast would fail)
CEILING = Path(__file__).resolve().parent.parent / "profiles" / "ceiling.toml"
CASTERS = 25


def fastest(plugin: str) -> dict[str, Any]:
    """The options of ``plugin`` in profiles/ceiling.toml."""
    specs = [d for d in load_profile(CEILING).drivers if d.plugin == plugin]
    return specs[0].options_dict if specs else {}


async def measure(plugin: str, url: str, seconds: float) -> tuple[float, float]:
    """(casts per second, CPU µs per cast)."""
    loaded = registry.get(plugin)
    options = loaded.check(fastest(plugin))
    transport = loaded.cls(TransportConfig((url,), options, "cast-cost"))
    target = Target("mqlab-cast-cost", "nobody-consumes")
    body = b"x" * 200
    sent = 0
    async with transport:
        # a server of another topic declares the exchange (AMQP 1.0 cannot declare one)
        await transport.serve_rpc(Target(target.exchange, "someone-else"), lambda b: None)
        await transport.cast(target, body)  # links, channels and declarations: not measured
        end = time.monotonic() + seconds

        async def caster() -> None:
            nonlocal sent
            while time.monotonic() < end:
                await transport.cast(target, body)
                sent += 1

        cpu, wall = time.process_time(), time.monotonic()
        await asyncio.gather(*(caster() for _ in range(CASTERS)))
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    return sent / wall, cpu / max(sent, 1) * 1e6


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    plugin, url = sys.argv[1], sys.argv[2]
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
    rate, us = uvloop.run(measure(plugin, url, seconds))
    print(f"{plugin}: {rate:,.0f} casts/s, {us:.1f} µs CPU per cast")


if __name__ == "__main__":
    main()
