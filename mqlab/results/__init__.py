"""The results file and what stands beside every figure: the file itself, read and written
(``store``), where it may be written (``paths``: only regular files mqlab wrote, a lock per
run), the environment of the run (``environment``) and the codec's cost on this machine
(``calibration``).
"""
