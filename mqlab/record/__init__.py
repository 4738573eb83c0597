"""A step's record: one typed, versioned value from the runner to every reader.

Each stage after a step's window returns its own typed section (:mod:`mqlab.record.step`
assembles them, :mod:`mqlab.record.sections` and its neighbours declare them); the
results file's keys are those sections' fields, declared once with the shape a reader
checks (:mod:`mqlab.record.shape`, :mod:`mqlab.record.wire`). Older results files
(schema 1 and 2) are read into the same type (:mod:`mqlab.record.legacy`).
"""
