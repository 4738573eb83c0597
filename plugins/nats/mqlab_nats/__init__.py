"""mqlab's ``nats`` plugin: NATS request/reply, queue groups and JetStream on nats-py.

Registered under the ``mqlab.transports`` entry point as ``nats``.
"""

from mqlab_nats.transport import NatsTransport

__all__ = ["NatsTransport"]
