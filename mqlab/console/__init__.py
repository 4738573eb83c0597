"""The command line: the console script (``entry``), the parser and short commands
(``cli``), ``mqlab run`` and ``mqlab ceiling`` as a pipeline (``run``), and what every command
shares: exit codes, the one-line error, a loaded and checked profile (``common``).
"""
