"""Managed servers: the handle every starter returns (``handle``), the servers plugins
declare by name and each driver's URLs (``managed``), and Debian's NATS, Redis and Mosquitto
as private child processes (``daemons``). RabbitMQ's own specifics live in
:mod:`mqlab.rabbitmq`.
"""
