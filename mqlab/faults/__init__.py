"""Faults on a step's timeline: events a profile lists, fired by one effector per kind.

- :mod:`mqlab.faults.timeline`: the runner's side: each event fired at its time, recorded;
- :mod:`mqlab.faults.broker`, :mod:`mqlab.faults.processes`, :mod:`mqlab.faults.link`: the
  effectors (a managed RabbitMQ node, a step's server workers, the fault proxy);
- :mod:`mqlab.faults.proxy`: the TCP fault proxy process;
- :mod:`mqlab.faults.verdict`: figures per event and the driver's promise checked.

The profile's side lives in :mod:`mqlab.config`: the ``event`` tables parsed and typed
(:mod:`mqlab.config.events`) and what this host and broker can do, refused before anything
starts (:mod:`mqlab.config.capable`).
"""
