"""The files a user names for mqlab to read: bounded in size, and never a wait forever.

A profile, a results file, a certificate: the path is opened without blocking (opening
a FIFO that nobody writes to would otherwise wait for a writer forever), a regular file
is read as it is, and anything else (a FIFO, a pipe, a terminal, a device) only while it
keeps answering: silent for :data:`QUIET_S` seconds, or silent from the start, it is
refused. Reading stops one byte past the caller's limit, so a larger input (``/dev/zero``)
is told apart without being read to its end.
"""

from __future__ import annotations

import errno
import os
import select
import stat
from pathlib import Path

__all__ = ["QUIET_S", "read"]

#: seconds a FIFO or a device may stay silent before it is refused
QUIET_S = 10.0
_CHUNK = 1 << 16


def read(path: str | Path, limit: int, quiet_s: float = QUIET_S) -> bytes:
    """Up to ``limit + 1`` bytes of what ``path`` names; OSError with a one-line
    ``strerror`` when it cannot be read (a directory, a silent FIFO or device)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory, not a file")
        if stat.S_ISREG(mode):
            os.set_blocking(fd, True)
            return _whole(fd, limit + 1)
        return _while_it_answers(fd, limit + 1, quiet_s)
    finally:
        os.close(fd)


def _whole(fd: int, most: int) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < most and (chunk := os.read(fd, min(_CHUNK, most - got))):
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _while_it_answers(fd: int, most: int, quiet_s: float) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < most:
        ready, _, _ = select.select([fd], [], [], quiet_s)
        if not ready:
            raise TimeoutError(
                errno.ETIMEDOUT,
                f"not a regular file, and it sent nothing for {quiet_s:g} s: give a file",
            )
        try:
            chunk = os.read(fd, min(_CHUNK, most - got))
        except BlockingIOError:
            continue
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    if not got:  # a FIFO no process writes to reads as at its end at once
        raise OSError(
            errno.ENODATA,
            "not a regular file, and nothing came from it (a FIFO nobody writes to?): give a file",
        )
    return b"".join(parts)
