"""The temporary folders large loads spill to, and what killed audits left of them.

A load too large for its memory limit has DuckDB write what does not fit to a folder of its
own, removed when its connection goes (:func:`make`). A process stopped by ``kill -9``, the
kernel's out-of-memory killer or a SIGTERM its Python did not handle never removes it, and
such folders grow by the gigabyte. Each folder therefore holds a lock, held by its process
for as long as it lives and released by the kernel however it ends; whoever makes a new
folder first removes every folder whose lock it can take (:func:`sweep`). A lock, unlike a
process id, also holds across containers that share ``/tmp`` but not process ids.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Final

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: folders are left for the system to clear
    fcntl = None  # type: ignore[assignment]

__all__ = ["PREFIX", "make", "sweep"]

PREFIX: Final = "handoffscope-spill-"
"""How a spill folder is named (then a random suffix), in the system's temporary folder."""
_LOCK: Final = "lock"


def make() -> tuple[str, int | None]:
    """A new spill folder, after :func:`sweep`; and the descriptor holding its lock (None
    where locks are not available), to be closed when the folder is removed."""
    sweep()
    folder = tempfile.mkdtemp(prefix=PREFIX)
    if fcntl is None:  # pragma: no cover
        return folder, None
    # Locked under another name, then named: a sweep finds the lock only once it is held.
    held = os.path.join(folder, _LOCK + ".new")
    fd = os.open(held, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.rename(held, os.path.join(folder, _LOCK))
    return folder, fd


def sweep(root: str | None = None) -> list[str]:
    """Remove the spill folders under ``root`` (the system's temporary folder) whose process
    is gone: those whose lock can be taken. Returns the folders removed. A folder without
    its lock yet (being made this instant) or that cannot be opened is left alone."""
    if fcntl is None:  # pragma: no cover
        return []
    removed = []
    for folder in Path(root or tempfile.gettempdir()).glob(PREFIX + "*"):
        try:
            fd = os.open(folder / _LOCK, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its process still runs
        else:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
        finally:
            os.close(fd)
    return removed
