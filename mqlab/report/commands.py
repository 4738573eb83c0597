"""The `mqlab report` and `mqlab compare` subcommands: readers of finished results files.

Bad input (no such file, not an mqlab results file, an unknown schema) is one
line on stderr and exit status 2, like every other mqlab command.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from mqlab.results import paths
from mqlab.results.read import ResultsError, load_run
from mqlab.terminal import console as safe_console

EXIT_BAD_INPUT = 2


def cmd_report(args: argparse.Namespace) -> int:
    from mqlab.report.html import write_report

    try:
        run = load_run(args.results)
    except ResultsError as exc:
        print(f"mqlab: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    out = Path(args.output) if args.output else run.path.with_suffix(".html")
    try:
        paths.check(out, str(run.path), paths.report_file, "report")
    except paths.OutputRefused as exc:
        print(f"mqlab: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        charts = write_report(run, out)
    except OSError as exc:
        print(f"mqlab: cannot write the report to {out}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"report: {out} ({len(run.steps)} step(s), {charts} chart(s); opens offline)")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from mqlab.report import compare

    try:
        a, b = load_run(args.a), load_run(args.b)
    except ResultsError as exc:
        print(f"mqlab: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    env = "\n".join(compare.environment_lines(a, b))
    if args.markdown:
        from mqlab.live import markdown

        head = f"A: {a.path.name} ({a.name}), B: {b.path.name} ({b.name})"
        print(
            f"{markdown.text(head)}\n\n{markdown.text(env)}\n\n"
            f"{compare.markdown(a, b)}\n\n{markdown.text(compare.NOISE_RULE)}"
        )
        return 0
    console = safe_console(width=200)
    console.print(f"A: {a.path} ({a.name})\nB: {b.path} ({b.name})\n{env}", highlight=False)
    console.print(compare.table(a, b))
    console.print(f"{compare.LEGEND} {compare.NOISE_RULE}", style="dim", highlight=False)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from mqlab.report import csvexport

    try:
        run = load_run(args.results)
    except ResultsError as exc:
        print(f"mqlab: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        (steps, n_steps), (series, n_series) = csvexport.write(run, Path(args.csv))
    except csvexport.Refused as exc:
        print(f"mqlab: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        print(f"mqlab: cannot write to {args.csv}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"steps: {steps} ({n_steps} rows)\nseries: {series} ({n_series} rows, one a second)")
    return 0


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Register `report` and `compare` through the CLI's ``command(name, **kwargs)``, which
    adds a subcommand and returns its parser."""
    p = command(
        "report",
        help="write a self-contained HTML report with charts from a results file",
        description="Writes one HTML file that opens offline (nothing fetched) with the run's "
        "question and findings, the environment, the comparison table, throughput / latency / "
        "CPU against load, each step's latency percentile spectrum and per-second timeline.",
        example="mqlab report results/quickstart.json -o quickstart.html",
    )
    p.add_argument("results", metavar="RESULTS", help="a results file (JSON) mqlab run wrote")
    p.add_argument(
        "-o", "--output", metavar="FILE",
        help="the HTML file (default: the results file's path, ending .html)",
    )  # fmt: skip
    p.set_defaults(func=cmd_report)

    p = command(
        "export",
        help="write a results file as CSV: one row per step, one per second of each step",
        description="Writes <name>.steps.csv (one row per step: counts, throughput, latency, "
        "CPU, flags, errors by kind) and <name>.series.csv (one row per second of each step's "
        "per-second series) into DIR, for pandas or a spreadsheet. A figure the results file "
        "does not hold is an empty cell.",
        example="mqlab export results/quickstart.json --csv out/",
    )
    p.add_argument("results", metavar="RESULTS", help="a results file (JSON) mqlab run wrote")
    p.add_argument("--csv", metavar="DIR", required=True, help="the directory to write into")
    p.set_defaults(func=cmd_export)

    p = command(
        "compare",
        help="compare two results files step by step (ratios B / A)",
        description="Puts the same steps of two runs side by side, matched by identity: the "
        "driver and its options, the scenario and all its settings, and the load (a step whose "
        "driver ran with other options is another step). Ratios are B / A; one that Welch's "
        "t-test cannot tell from the runs' own noise is marked ≈. What differs in the "
        "environment is listed first.",
        example="mqlab compare results/before.json results/after.json",
    )
    p.add_argument("a", metavar="A", help="the baseline results file")
    p.add_argument("b", metavar="B", help="the results file compared with it")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table, to publish")
    p.set_defaults(func=cmd_compare)
