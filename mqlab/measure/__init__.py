"""Measuring: latency histograms with failures inside them (``latency``), the receipt
bitmaps that find loss and duplicates (``ledger``), which message a body is
(``identify``), one worker's mergeable figures (``figures``), figures by phase (``phases``)
and repeats folded together (``aggregate``). Pure arithmetic on what the workers
recorded; it knows no transport and no process.
"""
