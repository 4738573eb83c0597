"""The docs' screenshots from a real run: the live monitor in tmux, then the HTML report.

    .venv/bin/python scripts/screenshots.py [PROFILE] [mqlab run options]

Runs ``mqlab run`` (default: profiles/pika-vs-kombu.toml --duration 3s --warmup 1s) in a
140 x 45 tmux pane on a tmux server of its own, captures the pane with its colours when
two thirds of the steps are done, renders the capture with Rich's SVG export and turns it
into docs/img/monitor.png with headless Chromium; when the run ends, ``mqlab report`` of its
results becomes docs/img/report.png (Chromium's --screenshot). Needs tmux and chromium.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.text import Text

ROOT = Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"
MQLAB = str(Path(sys.executable).with_name("mqlab"))


def chromium(*args: str) -> None:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        sys.exit("screenshots: chromium is not installed (apt-get install chromium)")
    subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    *args], check=True, capture_output=True, timeout=180)  # fmt: skip


def tmux(sock: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", sock, *args], check=True, capture_output=True,
                          text=True).stdout  # fmt: skip


def main() -> None:
    run_args = sys.argv[1:] or ["profiles/pika-vs-kombu.toml", "--duration", "2s", "--warmup", "1s"]
    IMG.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="mqlab-shots-"))
    results = tmp / "run.json"
    sock = f"mqlab-shots-{int(time.time())}"
    cmd = f"cd {ROOT} && env -u COLUMNS -u LINES {MQLAB} run {' '.join(run_args)} -o {results}"
    tmux(sock, "new-session", "-d", "-s", "shots", "-x", "140", "-y", "45", f"{cmd}; sleep 900")
    try:
        shot = ""
        while True:
            time.sleep(1)
            screen = tmux(sock, "capture-pane", "-p", "-t", "shots")
            m = re.search(r"(\d+)/(\d+) steps done", screen)
            if m and int(m[1]) * 3 >= int(m[2]) * 2 and "running" in screen and not shot:
                shot = tmux(sock, "capture-pane", "-p", "-e", "-t", "shots")
            if "results:" in screen or "failed" in screen.lower():
                break
        with open(os.devnull, "w") as sink:
            console = Console(record=True, width=140, force_terminal=True, file=sink)
            console.print(Text.from_ansi(shot.rstrip("\n")))
        svg = tmp / "monitor.svg"
        console.save_svg(str(svg), title="mqlab run " + " ".join(run_args))
        chromium("--window-size=1470,1010", f"--screenshot={IMG / 'monitor.png'}", svg.as_uri())
        html = tmp / "report.html"
        subprocess.run([MQLAB, "report", str(results), "-o", str(html)], check=True)
        chromium("--virtual-time-budget=20000", "--window-size=1400,2600",
                 f"--screenshot={IMG / 'report.png'}", html.as_uri())  # fmt: skip
        print(f"wrote {IMG / 'monitor.png'} and {IMG / 'report.png'} (results: {results})")
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], check=False, capture_output=True)


if __name__ == "__main__":
    main()
