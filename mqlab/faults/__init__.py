"""Faults on a step's timeline: events a profile lists, fired by one effector per kind.

- :mod:`mqlab.faults.events`: the profile's ``event`` tables, parsed and typed;
- :mod:`mqlab.faults.capable`: what this host and broker can do, refused before anything starts;
- :mod:`mqlab.faults.timeline`: the runner's side: each event fired at its time, recorded;
- :mod:`mqlab.faults.broker`, :mod:`mqlab.faults.workers`, :mod:`mqlab.faults.link`: the
  effectors (a managed RabbitMQ node, a step's server workers, the fault proxy);
- :mod:`mqlab.faults.proxy`: the TCP fault proxy process;
- :mod:`mqlab.faults.verdict`: figures per event and the driver's promise checked.

This package imports nothing at import time, so the profile reader can use its events.
"""
