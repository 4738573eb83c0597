"""mqlab's ``kombu`` plugin: oslo.messaging's rabbit (kombu) driver semantics on aio-pika."""

from mqlab_kombu.transport import KombuTransport

__all__ = ["KombuTransport"]
