"""Reading what a process wrote to a pseudo-terminal, for tests that run the console script
as a person at a shell would."""

from __future__ import annotations

import os


def read_terminal(main_fd: int) -> bytes:
    """Everything written to the terminal whose main side is ``main_fd``, until the last
    process holding it closes it."""
    shown = b""
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # the terminal closed: the process is done writing
            break
        if not chunk:
            break
        shown += chunk
    return shown
