"""The monitor's steps view at 140 x 45 with client-libraries.toml's 30 steps: every cell whole,
every row reachable by scrolling, nothing cropped."""

from __future__ import annotations

from rich.console import Console

from mqlab.live import panels
from mqlab.live.snapshot import RunSnapshot, StepRow

DRIVERS = [
    *(f"aiormq-p{p}" for p in (1, 4, 16, 64)),
    *("aiormq-p4-ack2", "aiormq-p16-ack8", "aiormq-p64-ack32"),
    *(f"{d}-p{p}" for d in ("kombu", "pika") for p in (1, 4, 16, 64)),
]


def _snap() -> RunSnapshot:
    rows = tuple(
        StepRow(i, DRIVERS[i % 15], "cast" if i < 15 else "notify", "c=25",
                "interrupted" if i == 3 else "done", sent=25_412_345 + i, received=25_412_345,
                lost=12_345 if i % 5 == 0 else 0, errors=12 if i % 4 == 0 else 0,
                rate_mean=123_456.7, p50_ms=1.23, p99_ms=123.4, p99_lower_bound=i % 6 == 0,
                failed_percent=0.12 if i % 4 == 0 else 0.0, cpu_clients=98.0, cpu_servers=143.0,
                cpu_broker=187.0, flags=("could_not_keep_up",) if i % 7 == 0 else ())
        for i in range(29)
    )  # fmt: skip
    cur = StepRow(29, "aiormq-p64-ack32", "notify", "c=25", "draining", sent=25_412_345,
                  received=25_412_345, rate_now=123_456.0, p50_ms=12.3, p99_ms=1_234.5)  # fmt: skip
    return RunSnapshot("client-libraries", 30, 30, 1234.0, 2345.0, "amqp://127.0.0.1:5672/",
                       cur, rows)  # fmt: skip


def _screen(scroll: int) -> list[str]:
    console = Console(width=140, height=45, color_system=None, force_terminal=True)
    with console.capture() as cap:
        console.print(panels.render(_snap(), panels.Screen(scroll=scroll)))
    return cap.get().rstrip("\n").splitlines()


def test_thirty_steps_fit_140_by_45_without_a_cut_cell() -> None:
    lines = _screen(0)
    text = "\n".join(lines)
    assert len(lines) <= 44, "the view is taller than the terminal"
    assert "…" not in text, "a cell was cut"
    assert all(len(line) <= 140 for line in lines)
    assert "25.41M" in text and "98/143/187" in text and "≥123" in text and "interrupted" in text
    assert "30 aiormq-p64-ack32 notify  c=25 draining" in text


def test_every_finished_row_is_reachable_by_scrolling() -> None:
    seen = set()
    for scroll in range(0, 40, 5):
        for line in _screen(scroll):
            first = line.split(" ", 2)[:2]
            if len(first) == 2 and first[0].isdigit():
                seen.add(int(first[0]))
            elif line.lstrip()[:2].strip().isdigit():
                seen.add(int(line.split()[0]))
    assert set(range(1, 31)) <= seen
