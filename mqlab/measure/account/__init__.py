"""The step's account: every message in exactly one place, as one pure function.

``history`` holds what the accountant reads (each client's sends dated by its marks, the
receipts, the events with their windows, the broker's depths, the fault proxies' holds,
lost hosts), ``buckets`` the accountant itself (:func:`account`), ``verdict`` the account
against the driver's promise, ``work`` failures per unit of intended work. Nothing here
reads a file, a socket or a clock.
"""

from mqlab.measure.account.buckets import BUCKETS, Account, Cause, account
from mqlab.measure.account.history import (
    Client,
    Depth,
    Event,
    Failure,
    History,
    Hold,
    HostLost,
    Receipts,
)
from mqlab.measure.account.verdict import NO_LOSS, ONCE, Promise, Verdict, judge
from mqlab.measure.account.work import Work, work

__all__ = [
    "BUCKETS",
    "NO_LOSS",
    "ONCE",
    "Account",
    "Cause",
    "Client",
    "Depth",
    "Event",
    "Failure",
    "History",
    "Hold",
    "HostLost",
    "Promise",
    "Receipts",
    "Verdict",
    "Work",
    "account",
    "judge",
    "work",
]
