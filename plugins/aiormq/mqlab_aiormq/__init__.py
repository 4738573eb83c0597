"""mqlab transport plugin on aiormq: the thinnest asyncio AMQP 0-9-1 path.

Registered as ``aiormq`` in the ``mqlab.transports`` entry-point group.
"""

from __future__ import annotations

from mqlab_aiormq.transport import AiormqTransport

__all__ = ["AiormqTransport"]
