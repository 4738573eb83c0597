"""`mqlab report`: one self-contained HTML file with charts from a results file.

:func:`mqlab.results.read.load_run` reads a results file (schema 1 or 2) into typed
values; :func:`write_report` writes the HTML.
"""

from mqlab.report.html import render, write_report
from mqlab.results.read import ResultsError, load_run
from mqlab.results.record import Run, Step

__all__ = ["ResultsError", "Run", "Step", "load_run", "render", "write_report"]
