"""mqlab's ``amqp1`` plugin: AMQP 1.0 via python-qpid-proton and pyngus on the asyncio loop."""

from mqlab_amqp1.transport import Amqp1Transport

__all__ = ["Amqp1Transport"]
