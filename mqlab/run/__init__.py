"""Running steps: the controller (``controller``: spawn, window, drain, collect, reap), the
drain on evidence (``drain``), figures gathered from workers (``collect``), a step's result
built once (``stepresult``), background stress and rolling updates as performed
(``background``, ``rolling``), the broker's own process sampled (``brokerprocess``), and what
the controller tells the live view (``progress``).
"""
