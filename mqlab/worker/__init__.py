"""A worker process and the controller's view of it: the process that starts a transport
and serves or sends (``process``), the closed and open loops (``workload``) paced by
``pacer`` and counted by ``recorder``, the control channel's frames (``protocol``), and the
pool of worker processes the controller spawns, feeds and reaps (``pool``).
"""
