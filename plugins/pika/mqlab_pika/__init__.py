"""mqlab's ``pika`` plugin: oslo.messaging's pika driver semantics on pika's asyncio adapter.

Registered under the ``mqlab.transports`` entry point as ``pika``.
"""

from mqlab_pika.transport import PikaTransport

__all__ = ["PikaTransport"]
