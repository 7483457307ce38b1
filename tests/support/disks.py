"""Small disks for full-disk faults: a tmpfs of a given size mounted on a folder (root only)."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["mount", "mount_tmpfs", "unmount"]


def mount(*args: str) -> bool:
    """Run ``mount`` with ``args``; whether it succeeded."""
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


def mount_tmpfs(where: Path, size: str) -> bool:
    """Mount a tmpfs of ``size`` (``2m``, ``8m`` ...) on the folder ``where``; whether it is."""
    return mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where))


def unmount(where: Path) -> None:
    """Unmount ``where`` lazily (a process may still hold a file on it)."""
    subprocess.run(["umount", "-l", str(where)], capture_output=True)
