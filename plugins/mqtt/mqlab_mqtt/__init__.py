"""mqlab's ``mqtt`` plugin: MQTT 5 on aiomqtt, against mosquitto.

Registered under the ``mqlab.transports`` entry point as ``mqtt``.
"""

from mqlab_mqtt.transport import MqttTransport

__all__ = ["MqttTransport"]
