"""`mqlab report`: one self-contained HTML file with charts from a results file.

:func:`mqlab.results.read.load_run` reads a results file (schema 1, 2 or 3) into the
record types; :func:`write_report` writes the HTML.
"""

from mqlab.record.step import StepRecord
from mqlab.report.html import render, write_report
from mqlab.results.read import ResultsError, load_run
from mqlab.results.record import Run

__all__ = ["ResultsError", "Run", "StepRecord", "load_run", "render", "write_report"]
