"""``mqlab selftest``: the known-answer cases on the loopback and on a managed RabbitMQ node,
each expected account printed beside the one found (issue 41)."""

from __future__ import annotations

import pytest

from mqlab.faults import knowncases
from tests.helpers import mqlab

pytestmark = pytest.mark.serial  # a node killed and an alarm timed within a step


#: alone, and a case only a managed node can run (flow control is `mqlab selftest`'s, run by
#: hand: the suite's time); pika's others (kill_server, cut, delay) are
#: tests/plugins/test_known_answer.py's, which the suite runs anyway
NODE_CASES = ("alone", "node_kill")


def test_selftest_finds_every_known_answer_and_says_so_per_case() -> None:
    cases = [a for c in NODE_CASES for a in ("--case", c)]
    proc = mqlab("selftest", *cases, timeout=900)
    print(proc.stdout)  # the closing note's table: loopback and pika
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # each case's first line in the table: plugin, case, expected, found, found?
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in proc.stdout.splitlines()]
    rows = [(c[0], c[-1]) for c in cells if len(c) == 5 and c[0]]
    want = [p for p in ("loopback", "pika") for c in knowncases.PLUGINS[p] if c in NODE_CASES]
    assert rows == [(p, "yes") for p in want], proc.stdout
    assert f"every known answer found ({len(want)} cases)" in proc.stdout


def test_selftest_refuses_an_unknown_case_in_one_line() -> None:
    proc = mqlab("selftest", "--case", "nope")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"mqlab: selftest: no case nope; the cases are {', '.join(knowncases.CASES)}"
    ]
