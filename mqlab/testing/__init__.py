"""mqlab's conformance kit: the transport contract as tests a plugin author runs.

Subclass :class:`ConformanceSuite` in your plugin's tests and override its
``subject`` fixture to describe your transport (see docs/writing-a-plugin.md).
The checks are plain ``async def check(subject)`` functions in
:mod:`mqlab.testing.delivery` and :mod:`mqlab.testing.lifecycle`, runnable one
by one with :func:`run`. Only this package imports pytest; mqlab itself never
imports it.
"""

from mqlab.testing.kit import Kit, Recorder, core_caster, run
from mqlab.testing.rabbitmq import RabbitMQ
from mqlab.testing.subject import SECRET, Subject, closed_port
from mqlab.testing.suite import ConformanceSuite

__all__ = [
    "SECRET",
    "ConformanceSuite",
    "Kit",
    "RabbitMQ",
    "Recorder",
    "Subject",
    "closed_port",
    "core_caster",
    "run",
]
