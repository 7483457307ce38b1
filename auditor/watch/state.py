"""The watch state file: what was read, what was alerted, what is still to deliver.

One small JSON document, replaced atomically (write a temporary file beside it, fsync, rename,
fsync the folder), so a crash leaves either the old state or the new one, never half of each.
Read positions, alert memory and the poll's new alerts (in the outbox) are saved together
before the alerts are handed to the sinks. Each delivery is then appended to a small journal
beside the state file (:class:`DeliveryJournal`, one fsynced line per alert), so a crash at any
point repeats at most the alert that was being delivered (at-least-once delivery; every alert
carries a stable ``id`` to deduplicate on).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from auditor.watch.alert import Alert
from auditor.watch.follow import Cursor
from collector.errors import ConfigurationError
from collector.pidlock import LockHeld, hold_lock

STATE_FILE_NAME = ".handoffscope-watch.json"
"""Default state file name, inside the followed directory (hidden, so it is never followed)."""

STATE_VERSION = 1


@dataclass(slots=True)
class WatchState:
    """Everything ``watch`` remembers between polls and across restarts."""

    cursors: list[Cursor] = field(default_factory=list)
    dedupe: dict[str, Any] = field(default_factory=dict)
    """Alert memory (see ``auditor.watch.dedupe.Deduper.to_json``)."""
    receivers: dict[str, Any] = field(default_factory=dict)
    """Per-receiver p95 state and its recent samples (see ``auditor.watch.p95``)."""
    outbox: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Alerts accepted but not yet delivered, per sink name."""
    generation: int = 0
    """Counts saves; the delivery journal's lines of this generation apply to ``outbox``."""

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "generation": self.generation,
            "files": [c.to_json() for c in self.cursors],
            "dedupe": self.dedupe,
            "receivers": self.receivers,
            "outbox": self.outbox,
        }


def load_state(path: Path) -> WatchState:
    """Read the state file; a missing file is a fresh start, a damaged one an error."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return WatchState()
    except OSError as e:
        raise ConfigurationError(f"cannot read the watch state file {path}: {e.strerror}") from e
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise ValueError(f"expected version {STATE_VERSION}")
        return WatchState(
            cursors=[Cursor.from_json(c) for c in data.get("files", [])],
            dedupe=dict(data.get("dedupe", {})),
            receivers=dict(data.get("receivers", {})),
            outbox={str(k): list(v) for k, v in dict(data.get("outbox", {})).items()},
            generation=int(data.get("generation", 0)),
        )
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ConfigurationError(
            f"the watch state file {path} is damaged ({e}); move it away to start over "
            "(old alerts may then be sent again), or pass --state with another path"
        ) from e


def cannot_write(path: Path, error: OSError) -> ConfigurationError:
    """The error for a state file that cannot be written, saying what to do instead."""
    return ConfigurationError(
        f"cannot write the watch state file {path} ({error.strerror or error}): give --state"
        " a path in a folder this user can write, or run with --no-state (alerts may then"
        " repeat after a restart)"
    )


def check_writable(path: Path) -> None:
    """Raise :func:`cannot_write`'s error now, before anything is read, if the state file
    could not be saved (its folder is read-only, or is not a folder)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        os.unlink(tmp)
        if path.exists() and not os.access(path, os.R_OK):
            raise PermissionError(13, "Permission denied", str(path))
    except OSError as e:
        raise cannot_write(path, e) from e


def save_state(path: Path, state: WatchState) -> None:
    """Replace the state file atomically; a failure raises :func:`cannot_write`'s error."""
    text = json.dumps(state.to_json(), separators=(",", ":"), sort_keys=True)
    try:
        _replace(path, text)
    except OSError as e:
        raise cannot_write(path, e) from e


def _replace(path: Path, text: str) -> None:
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:
        dir_fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return  # some platforms cannot open folders; the rename is still atomic
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def lock_state(path: Path) -> int:
    """Hold the state file for this process; returns the lock's descriptor (close to release).

    Two ``watch`` processes sharing one state file would each send every alert; the second
    one is refused with a message naming the first one's pid.
    """
    lock = path.with_name(path.name + ".lock")
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        return hold_lock(lock)
    except OSError as e:
        raise cannot_write(path, e) from e
    except LockHeld as e:
        raise ConfigurationError(
            f"another handoffscope watch (pid {e.holder}) is using the state file {path};"
            " stop it, or give this one its own --state"
        ) from e


JOURNAL_SUFFIX = ".delivered"
"""The delivery journal sits beside the state file, named like it with this suffix."""


class DeliveryJournal:
    """Which alerts of the saved outbox were delivered (or dropped) since the last save.

    One line per alert, ``[generation, sink, alert id]``, appended and fsynced as each one
    is done with: cheaper than rewriting the whole state per alert. A line counts only for
    the state file of its generation, so a save (which writes the outbox as it then is) makes
    the older lines moot, and they are cleared after it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: Any = None

    def record(self, generation: int, sink: str, alert_id: str) -> None:
        """Note that ``sink`` is done with ``alert_id``; on disk before this returns."""
        try:
            if self._file is None:
                self._file = self.path.open("a", encoding="utf-8")
            self._file.write(json.dumps([generation, sink, alert_id]) + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as e:
            raise cannot_write(self.path, e) from e

    def reset(self) -> None:
        """Forget every line (after a save made them moot)."""
        self.close()
        try:
            with self.path.open("w", encoding="utf-8"):
                pass
        except OSError as e:
            raise cannot_write(self.path, e) from e

    def done(self, generation: int) -> list[tuple[str, str]]:
        """``(sink, alert id)`` of the lines that apply to the state of ``generation``; a
        line torn by a crash is ignored (its alert was the one in flight)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as e:
            raise ConfigurationError(f"cannot read {self.path}: {e.strerror or e}") from e
        out = []
        for line in text.splitlines():
            try:
                gen, sink, alert_id = json.loads(line)
            except (ValueError, TypeError):
                continue
            if gen == generation:
                out.append((str(sink), str(alert_id)))
        return out

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def without_done(
    outbox: dict[str, list[dict[str, Any]]], done: list[tuple[str, str]]
) -> dict[str, list[dict[str, Any]]]:
    """``outbox`` less one saved alert per ``(sink, alert id)`` the journal holds."""
    left = {name: list(saved) for name, saved in outbox.items()}
    for sink, alert_id in done:
        saved = left.get(sink, [])
        for index, data in enumerate(saved):
            if _alert_id(data) == alert_id:
                del saved[index]
                break
    return {name: saved for name, saved in left.items() if saved}


def _alert_id(data: dict[str, Any]) -> str | None:
    try:
        return Alert.from_json(data).id
    except (ValueError, TypeError, KeyError):
        return None
