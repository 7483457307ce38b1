"""An exclusive, advisory lock file that records its holder's pid.

``handoffscope collect`` locks its output directory and ``watch`` its state file with it, so a
second process is refused with a message naming the first one instead of silently
interleaving writes or sending every alert twice.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

__all__ = ["LockHeld", "hold_lock"]


class LockHeld(Exception):
    """Another process holds the lock; ``holder`` is its pid as it wrote it (or ``unknown``)."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"{path} is held by pid {holder}")
        self.path = path
        self.holder = holder


def hold_lock(path: Path) -> int:
    """Take the lock at ``path`` without waiting; return its descriptor (close it to release).

    Raises ``LockHeld`` when another process holds it. The lock is the kernel's (``flock``),
    so it is released when its holder dies, however it dies.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EACCES):
            raise LockHeld(path, holder) from e
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
