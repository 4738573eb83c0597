"""Docs that cannot drift (issue 36, part 6): a figure a page says was measured is in
docs/findings.md (or, measured before runs were stored, in its lab notebook docs/history.md),
and every link into either lands on one of its sections.

A "measured figure" is a rate (``msg/s``), a ratio (``2.30x``) or a latency percentile
(``p99 14.9 ms``) in a paragraph that says "measured": findings.md is where each is written
down with its run, time and commit; other pages point there instead of copying.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FINDINGS = ROOT / "docs" / "findings.md"
HISTORY = ROOT / "docs" / "history.md"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FIGURE = re.compile(
    r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)(?:\s?msg/s| ?x\b)"  # a rate or a ratio
    r"|p\d\d\w* (?:of )?(\d[\d,]*(?:\.\d+)?) ?ms"  # a latency percentile
)
LINK = re.compile(r"\]\((?:docs/)?findings\.md#([^)\s]+)\)")
HISTORY_LINK = re.compile(r"\]\((?:docs/)?history\.md#([^)\s]+)\)")


def anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = heading.lstrip("#").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def quoted_figures(text: str) -> list[tuple[str, str]]:
    """(figure, its paragraph's start) for every measured figure in ``text``."""
    out = []
    for para in re.split(r"\n\s*\n", text):
        if not re.search(r"\bmeasured\b", para, re.IGNORECASE):
            continue
        for m in FIGURE.finditer(para):
            number = (m.group(1) or m.group(2)).rstrip(",")
            out.append((number, para.strip()[:70]))
    return out


def test_every_measured_figure_a_page_quotes_is_in_findings() -> None:
    findings = FINDINGS.read_text() + HISTORY.read_text()
    missing = [
        f"{page.relative_to(ROOT)}: {figure} ({where}...)"
        for page in PAGES
        if page not in (FINDINGS, HISTORY)
        for figure, where in quoted_figures(page.read_text())
        if figure not in findings
    ]
    assert missing == [], "measured figures not in docs/findings.md:\n" + "\n".join(missing)


def test_drivers_page_points_to_findings_instead_of_quoting_rates() -> None:
    text = (ROOT / "docs" / "drivers.md").read_text()
    rates = re.findall(r"\d[\d,]*(?:\.\d+)? ?msg/s", text)
    assert rates == [], f"docs/drivers.md quotes rates; point to findings.md instead: {rates}"
    assert len(LINK.findall(text)) >= 5  # kombu, pika, aiormq, amqp1, zmq, oslo


def test_every_link_into_findings_lands_on_a_section() -> None:
    sections = {anchor(line) for line in FINDINGS.read_text().splitlines() if line[:1] == "#"}
    broken = [
        f"{page.relative_to(ROOT)}: #{target}"
        for page in PAGES
        for target in LINK.findall(page.read_text())
        if target not in sections
    ]
    broken += [f"findings.md: #{t}" for t in re.findall(r"\]\(#([^)\s]+)\)", FINDINGS.read_text())
               if t not in sections]  # fmt: skip
    notebook = {anchor(line) for line in HISTORY.read_text().splitlines() if line[:1] == "#"}
    broken += [
        f"{page.relative_to(ROOT)}: history.md#{target}"
        for page in PAGES
        for target in HISTORY_LINK.findall(page.read_text())
        if target not in notebook
    ]
    assert broken == [], "links to no section of docs/findings.md:\n" + "\n".join(broken)


def test_the_scanner_sees_a_copied_figure() -> None:
    # the check itself: a figure that findings.md does not hold is reported
    page = "Measured here: call 123,457 msg/s (p99 98.7654 ms), 9.87x the other."
    assert [f for f, _ in quoted_figures(page)] == ["123,457", "98.7654", "9.87"]
