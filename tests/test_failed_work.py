"""Failures counted per unit of the work the senders meant to do, beside the raw attempts
(issue 41, defect 5).

A driver that fails fast in a closed loop (``Undeliverable`` at once) tries again at once:
during a second of outage it fails thousands of attempts where a driver that blocks fails
none, yet both lost the same second of work. The end-to-end test registers a test-only
plugin (a loopback transport refusing every cast for one second) the way a user's plugin
is registered, and runs it through ``mqlab run``: its worker processes, its table.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import plugin_site, run_with_plugins, write_profile

_FLAKY = '''
"""A loopback transport whose casts take 5 ms, and which refuses every cast at once during
the second second of its sends."""
import asyncio
import time

from mqlab.errors import Undeliverable
from mqlab.loopback import LoopbackTransport

_FIRST = []


class FlakyTransport(LoopbackTransport):
    def begin_cast(self, target, body):
        now = time.monotonic()
        if not _FIRST:
            _FIRST.append(now)
        if 1.0 <= now - _FIRST[0] < 2.0:
            raise Undeliverable("nobody listens (the test's outage)")
        return self._slow(target, body)

    async def _slow(self, target, body):
        await asyncio.sleep(0.005)
        waiting = super().begin_cast(target, body)
        if waiting is not None:
            await waiting
'''


def _register(site: Path) -> None:
    plugin_site(site, "flaky", _FLAKY, "FlakyTransport")


def test_a_driver_failing_fast_fails_its_share_of_the_work_not_of_its_attempts(
    tmp_path: Path,
) -> None:
    _register(tmp_path / "site")
    profile = write_profile(
        tmp_path / "p.toml",
        '[run]\nduration = "3s"\nwarmup = "0s"\ndrain = "2s"\n'
        '[drivers.flaky]\nplugin = "flaky"\n'
        '[[scenario]]\npattern = "cast"\nconcurrency = 4\n',
    )
    out = tmp_path / "r.json"
    proc = run_with_plugins(tmp_path / "site", str(profile), "-o", str(out), timeout=120)
    assert proc.returncode == 0, proc.stderr
    [step] = json.loads(out.read_text())["steps"]
    work, lat = step["work"], step["latency_ms"]
    # thousands of quick refusals in the outage: most attempts of the window failed ...
    attempts = work["failed_attempts"]
    assert attempts > work["completed"], work
    # ... but the work they cost is the second of sending that was missing, about a third
    # of the window: the failed share and the percentiles count that, not the attempts
    assert work["failed"] < attempts and 15 < work["share"] < 50, work
    # (the percentiles' share over the measured latencies, the work's over the completions)
    assert lat["failed"] == work["failed"], lat
    assert abs(lat["failed_percent"] - work["share"]) < 1, (lat, work)
    # the refused sends are the account's, by number, in sends that failed: not lost silently
    assert step["account"]["unexplained"] == 0 and step["lost"] > 0, step["account"]
    assert (
        "in sends that failed" in step["verdict"]["note"]
        or "refused by flaky" in (step["verdict"]["note"])
    ), step["verdict"]
    # the table says the share and the raw count beside it
    assert f"({attempts:,} tries)" in proc.stdout, proc.stdout
