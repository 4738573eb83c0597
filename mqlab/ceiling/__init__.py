"""Ceilings: each plain cast step beside its library's own loop and RabbitMQ PerfTest.
A reference loop run in its own processes (``refloop``), PerfTest fetched and run
(``perftest``), the step's CPU per message beside the loop's (``share``), and the runner's
after-step hook with its table (``hook``).
"""
