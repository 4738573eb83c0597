"""The environment a results file records: which mqlab commit measured the figures."""

from __future__ import annotations

import subprocess

from mqlab.results.environment import mqlab_commit
from tests.helpers import ROOT


def test_a_run_from_a_checkout_names_its_commit() -> None:
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    commit = mqlab_commit()
    assert commit is not None and commit.removesuffix("+dirty") == head
