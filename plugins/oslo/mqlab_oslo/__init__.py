"""mqlab's ``oslo`` plugin: oslo.messaging itself (rabbit driver, threading executor)."""

from mqlab_oslo.transport import OsloTransport

__all__ = ["OsloTransport"]
