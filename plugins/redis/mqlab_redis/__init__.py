"""mqlab's ``redis-streams`` plugin: Redis Streams and consumer groups on redis-py asyncio.

Registered under the ``mqlab.transports`` entry point as ``redis-streams``.
"""

from mqlab_redis.transport import RedisStreamsTransport

__all__ = ["RedisStreamsTransport"]
