"""The sizes a run can reach: the bounds both a profile's checks and a results file's shape
take, from one place.

:mod:`mqlab.config.limits` refuses a profile past them (with every other check of what a
user gives); :mod:`mqlab.record` refuses a results file holding a figure past them; a
managed RabbitMQ cluster (:mod:`mqlab.rabbitmq`) has at most ``MAX_NODES`` nodes.
"""

from __future__ import annotations

#: one message; RabbitMQ 4's default max_message_size, and what a codec calibrates in a blink
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: durations, timeouts and drains: a day is the longest run anyone measures
MAX_DURATION_S = 24 * 3600.0
#: a call's timeout and the drain: each is waited for after the window, step after step
MAX_WAIT_S = 600.0
#: open-loop msg/s per step (the pacer's schedule, not a promise the machine keeps it)
MAX_RATE = 10_000_000.0
MAX_REPEAT = 100
#: nodes of a managed RabbitMQ cluster (``[broker] nodes``, ``mqlab broker start --nodes``)
MAX_NODES = 5
#: steps of one run (repeats x scenarios x levels x drivers)
MAX_STEPS = 10_000
#: servers per target, targets, pools: each is a worker or a queue set up before the window
MAX_SERVERS = 64
MAX_TARGETS = 64
#: targets when ``consumers`` connections share them (seed 002: 100 queues)
MAX_SHARED_TARGETS = 256
