"""What a killed run left behind: its step directories, found and removed by the next run.

A run removes each step's directory (the workers' ledgers, a plugin's scratch files) when
the step ends, and on Ctrl-C, SIGTERM, SIGHUP or SIGQUIT. Only SIGKILL or a crash of the
machine leave one: its name carries the pid of the run that made it, so the next run can
tell a dead run's directory from a live one's and remove it (and say so).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

STEP_PREFIX = "mqlab-step-"
_NAME = re.compile(rf"{STEP_PREFIX}(\d+)-")


def step_dir() -> str:
    """A new step directory (mode 0700), named for this run's pid."""
    return tempfile.mkdtemp(prefix=f"{STEP_PREFIX}{os.getpid()}-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep() -> list[Path]:
    """Remove this user's step directories whose run is gone; the ones removed."""
    root = Path(tempfile.gettempdir())
    removed = []
    try:
        names = os.listdir(root)
    except OSError:
        return []
    for name in names:
        m = _NAME.match(name)
        if m is None or _alive(int(m[1])):
            continue
        path = root / name
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue  # another user's, or not ours to remove
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
