"""mqlab's ``kafka`` plugin: Apache Kafka topics and consumer groups on aiokafka.

Registered under the ``mqlab.transports`` entry point as ``kafka``.
"""

from mqlab_kafka.transport import KafkaTransport

__all__ = ["KafkaTransport"]
