"""The check of a plugin's reference loop: what ``mqlab ceiling`` runs beside its cast steps."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from mqlab.ceiling import refloop
from mqlab.errors import PluginError
from mqlab.sdk import reference
from mqlab.sdk.reference import ReferenceSpec
from mqlab.testing.lifecycle import nothing_left
from mqlab.testing.subject import Subject

#: deliveries the loop's consumer must count in its window: more than twice any consumer
#: window a plugin defaults to (prefetch 64, credit 100), so a consumer that never
#: acknowledges, and stops at its window, fails the check; not more, since a loaded
#: machine slows the slowest loop (mqtt at QoS 1) to a few hundred in the 1.5 s
AT_LEAST = 250


#: seconds the publisher goes on once its consumer stopped, in the consumer-first check
PUBLISHER_AFTER = 1.0


async def reference_loop(
    subject: Subject, options: Mapping[str, Any] | None = None, consumer_first: bool = False
) -> None:
    """The plugin ships a reference loop; on the subject's server, in the ack mode these
    options give, its consumer receives what its publisher sends, and it leaves nothing.
    ``consumer_first``: the consumer stops :data:`PUBLISHER_AFTER` seconds before the
    publisher, which must still stop and report (not wait for a consumer that is gone).
    A loop that does not report is shown with its threads' stacks and its stderr."""
    plugin = subject.load()
    loop = subject.reference or plugin.name
    try:
        reference.load(loop)
    except PluginError as exc:
        raise AssertionError(
            f"{exc}: `mqlab ceiling` cannot show its library's ceiling "
            "(docs/writing-a-plugin.md, 'A reference loop')"
        ) from None
    checked = plugin.check({**subject.options, **(options or {})})
    name = f"mqlab-kit-ref-{uuid.uuid4().hex[:10]}"
    spec = ReferenceSpec(subject.urls, name, 201, checked)
    try:
        got = await refloop.measure(
            # the window opens `warmup` after the consumer is ready, and the publisher only
            # starts then: a loaded machine's Python (oslo's imports) needs the seconds
            loop, spec, warmup=2.0, duration=1.5,
            publisher_after=PUBLISHER_AFTER if consumer_first else 0.0,
        )  # fmt: skip
    except refloop.LoopFailed as exc:
        first = " (its consumer stopped first)" if consumer_first else ""
        raise AssertionError(f"the reference loop{first} failed: {exc}\n{exc.stderr}") from None
    received = got.received_per_s * got.seconds
    figures = f"{got.sent_per_s:.0f} sent/s, {got.received_per_s:.0f} received/s"
    assert got.sent_per_s > 0, f"the loop's publisher sent nothing ({figures})\n{got.stderr}"
    assert received >= AT_LEAST, (
        f"the loop's consumer received {received:.0f} messages in {got.seconds:.1f} s "
        f"(at least {AT_LEAST} expected; does it acknowledge?) ({figures})\n{got.stderr}"
    )
    await nothing_left(subject, name, "by the reference loop")
