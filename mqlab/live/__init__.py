"""The live view: what a snapshot holds (``snapshot``), the step tables shared with
``mqlab show`` (``tables``), the monitor's timeline series (``timeline``), its four views as
pure functions of a snapshot (``panels``, with ``sparklines`` and ``texttable``), and the
interactive monitor that draws them (``monitor``). It renders snapshots; it measures nothing.
"""
