"""mqlab's ``pyamqp`` plugin: py-amqp in threads, one connection per thread."""

from mqlab_pyamqp.transport import PyamqpTransport

__all__ = ["PyamqpTransport"]
