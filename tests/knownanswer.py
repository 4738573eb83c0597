"""The known-answer wrapper registered the way a user's plugin is: an installed
distribution's entry points (``known-pika`` and the like, :mod:`mqlab.faults.knownanswer`),
on the ``PYTHONPATH`` of ``mqlab run`` and so of its workers."""

from __future__ import annotations

from mqlab.faults.knowncases import register
from tests.helpers import run_with_plugins as run

__all__ = ["register", "run"]
