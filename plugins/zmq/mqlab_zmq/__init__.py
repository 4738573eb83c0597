"""mqlab's ``zmq`` transport plugin: brokerless ZeroMQ with a static or Redis matchmaker."""

from mqlab_zmq.transport import ZmqTransport

__all__ = ["ZmqTransport"]
