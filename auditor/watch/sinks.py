"""Where alerts go: a terminal line, a JSON-lines file, a webhook, a command.

The webhook and the command run on their own threads behind a bounded outbox, so a slow or
unreachable endpoint never delays reading traces. The webhook keeps alerts, in order, while
the endpoint is down: transient failures (connection refused, timeouts, HTTP 408, 425, 429 and
5xx) are retried with exponential backoff for as long as it takes; a refusal (any other 4xx)
is retried ``retries`` times and then dropped with an error naming the alert. When the outbox
is full the oldest alert is dropped, with a warning. What is still queued at shutdown is
handed back to be saved in the state file and sent after the next start.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any, Protocol

from auditor.watch.alert import Alert, render_json, render_line, render_slack
from collector import __version__
from collector import environment_variables as ev

Log = Callable[[str], None]

DEFAULT_WEBHOOK_TIMEOUT_S = 5.0
DEFAULT_WEBHOOK_RETRIES = 3
DEFAULT_OUTBOX_SIZE = 10_000
DEFAULT_EXEC_TIMEOUT_S = 30.0
BACKOFF_FIRST_S = 0.25
"""First retry delay; each failure doubles it (with jitter) up to ``BACKOFF_MAX_S``."""
BACKOFF_MAX_S = 30.0
WEBHOOK_FORMATS = ("json", "slack")
TRANSIENT_STATUS = frozenset({408, 425, 429})


_STDERR_LOCK = threading.Lock()


def log_stderr(message: str) -> None:
    """Write one diagnostic line to stderr; lines from several threads never interleave."""
    with _STDERR_LOCK:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()


class Sink(Protocol):
    """Something that receives alerts."""

    name: str

    def send(self, alert: Alert) -> None:
        """Accept one alert (queue it or deliver it)."""

    def pending(self) -> list[Alert]:
        """Alerts accepted but not yet delivered."""

    def close(self, *, timeout_s: float) -> None:
        """Deliver what is queued, waiting at most ``timeout_s``, then stop."""


def _held_within(held: deque[Alert], alert: Alert, size: int) -> Alert | None:
    """Keep ``alert`` after those ``held``; beyond ``size`` the oldest goes, and is returned:
    every sink's outbox is bounded so."""
    held.append(alert)
    return held.popleft() if len(held) > size else None


class StreamSink:
    """A readable line per alert on a text stream (stdout by default).

    A write that fails (the reader of a pipe went away, the disk under a redirect is full)
    ends the sink's writing for good: :attr:`failure` holds the error, and that alert and
    every later one stay :meth:`pending`, to be saved for the next start (the oldest
    dropped beyond ``outbox_size``), never counted as printed.
    """

    name = "stdout"
    recovers = False
    """A closed pipe never reopens: once writing failed, the sink is out for good."""

    def __init__(
        self, stream: IO[str] | None = None, *, outbox_size: int = DEFAULT_OUTBOX_SIZE
    ) -> None:
        self._stream = stream
        self._size = outbox_size
        self._held: deque[Alert] = deque()
        self.failure: OSError | None = None
        """The write error that stopped this sink, if one did."""
        self.dropped = 0

    def send(self, alert: Alert) -> None:
        if self.failure is None:
            stream = self._stream or sys.stdout
            try:
                stream.write(render_line(alert) + "\n")
                stream.flush()
                return
            except OSError as e:
                # A closed pipe never reopens, and a retried write would repeat what a
                # full disk kept of the last one: stop here and keep the alerts.
                self.failure = e
        if _held_within(self._held, alert, self._size) is not None:
            self.dropped += 1

    def pending(self) -> list[Alert]:
        return list(self._held)

    def close(self, *, timeout_s: float) -> None:
        return None


class JsonlSink:
    """Appends each alert's JSON payload as one line to a file, flushed to disk.

    A write that fails (a full disk) is undone, so the file never holds half a line, and the
    alert is kept with every later one (the oldest dropped beyond ``outbox_size``): each
    later send tries them again first, in order, and what is still kept at shutdown is saved
    for the next start. :attr:`failure` holds the error while the file cannot be written.
    """

    name = "jsonl"
    recovers = True
    """A failure may pass (room is made on the disk): the watch goes on without it."""

    def __init__(self, path: Path, *, outbox_size: int = DEFAULT_OUTBOX_SIZE) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        self._size = outbox_size
        self._held: deque[Alert] = deque()
        self.failure: OSError | None = None
        self.dropped = 0
        self.on_done: Callable[[Alert], None] | None = None
        """Called once an alert's line is on disk (the watcher journals it)."""

    def send(self, alert: Alert) -> None:
        if _held_within(self._held, alert, self._size) is not None:
            self.dropped += 1
        self._write_held()

    def _write_held(self) -> None:
        while self._held and self._fd is not None:
            alert = self._held[0]
            data = (render_json(alert) + "\n").encode("utf-8")
            end = os.fstat(self._fd).st_size
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view) :]
                os.fsync(self._fd)
            except OSError as e:
                self.failure = e
                try:
                    os.ftruncate(self._fd, end)  # no half line for readers to trip on
                except OSError:
                    pass
                return
            self.failure = None
            self._held.popleft()
            if self.on_done is not None:
                self.on_done(alert)

    def pending(self) -> list[Alert]:
        return list(self._held)

    def close(self, *, timeout_s: float) -> None:
        self._write_held()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class _QueuedSink:
    """A worker thread draining a bounded outbox in order; subclasses deliver one alert."""

    name = "queued"

    def __init__(self, *, outbox_size: int, log: Log) -> None:
        self._outbox: deque[Alert] = deque()
        self._size = outbox_size
        self._cond = threading.Condition()
        self._closing = False
        self._deadline = float("inf")
        self._log = log
        self.delivered = 0
        self.dropped = 0
        self.on_done: Callable[[Alert], None] | None = None
        """Called (on the sink's thread) once an alert is delivered or given up, after it
        left the outbox: the watcher records it, so a restart does not send it again."""
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.name}", daemon=True)
        self._thread.start()

    def send(self, alert: Alert) -> None:
        with self._cond:
            lost = _held_within(self._outbox, alert, self._size)
            if lost is not None:
                self.dropped += 1
                self._log(
                    f"watch: {self.name} outbox full ({self._size} alerts); dropped the oldest, "
                    f"{lost.id} ({lost.rule})"
                )
            self._cond.notify_all()
        if lost is not None and self.on_done is not None:
            self.on_done(lost)

    def pending(self) -> list[Alert]:
        with self._cond:
            return list(self._outbox)

    def close(self, *, timeout_s: float) -> None:
        with self._cond:
            self._closing = True
            self._deadline = time.monotonic() + timeout_s
            self._cond.notify_all()
        self._thread.join(timeout_s + 1.0)

    def _sleep(self, seconds: float) -> bool:
        """Wait, unless closing; False when the shutdown deadline would pass first."""
        with self._cond:
            if time.monotonic() + seconds > self._deadline:
                return False
            end = time.monotonic() + seconds
            while (left := end - time.monotonic()) > 0:
                if self._closing and time.monotonic() + left > self._deadline:
                    return False
                self._cond.wait(left)
            return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._outbox and not self._closing:
                    self._cond.wait()
                if not self._outbox or time.monotonic() >= self._deadline:
                    return
                alert = self._outbox[0]
            if not self._deliver(alert):
                return
            with self._cond:
                if not (self._outbox and self._outbox[0] is alert):
                    continue  # pushed out of a full outbox meanwhile (and recorded then)
                self._outbox.popleft()
            if self.on_done is not None:
                self.on_done(alert)

    def _deliver(self, alert: Alert) -> bool:
        """Deliver or give up on one alert; False to stop (shutdown deadline reached)."""
        raise NotImplementedError


class WebhookSink(_QueuedSink):
    """POSTs each alert as JSON (the documented payload, or a Slack message)."""

    name = "webhook"

    def __init__(
        self,
        url: str,
        *,
        fmt: str = "json",
        headers: Mapping[str, str] | None = None,
        timeout_s: float = DEFAULT_WEBHOOK_TIMEOUT_S,
        retries: int = DEFAULT_WEBHOOK_RETRIES,
        outbox_size: int = DEFAULT_OUTBOX_SIZE,
        backoff_first_s: float = BACKOFF_FIRST_S,
        backoff_max_s: float = BACKOFF_MAX_S,
        log: Log = log_stderr,
    ) -> None:
        self._url = url
        self._fmt = fmt
        self._headers = {
            "Content-Type": "application/json",
            "User-Agent": f"handoffscope-watch/{__version__}",
            **(headers or {}),
        }
        self._timeout = timeout_s
        self._retries = retries
        self._backoff_first = backoff_first_s
        self._backoff_max = backoff_max_s
        self.failures = 0
        super().__init__(outbox_size=outbox_size, log=log)

    def _body(self, alert: Alert) -> bytes:
        data = render_slack(alert) if self._fmt == "slack" else alert.payload()
        return json.dumps(data, ensure_ascii=False).encode("utf-8")

    def _post(self, body: bytes) -> tuple[bool, bool, float | None, str]:
        """One attempt: (delivered, transient, retry-after seconds, what happened)."""
        request = urllib.request.Request(self._url, data=body, headers=self._headers, method="POST")
        try:
            with _OPENER.open(request, timeout=self._timeout) as response:
                response.read(65536)
                return True, False, None, f"HTTP {response.status}"
        except urllib.error.HTTPError as e:
            status = e.code
            transient = status >= 500 or status in TRANSIENT_STATUS
            what = f"HTTP {status}"
            if 300 <= status < 400:
                what += f" redirect to {e.headers.get('Location')}; give --webhook that URL"
            return False, transient, _retry_after(e.headers.get("Retry-After")), what
        except (urllib.error.URLError, OSError, TimeoutError) as e:
            reason = getattr(e, "reason", e)
            return False, True, None, f"{type(reason).__name__}: {reason}"

    def _deliver(self, alert: Alert) -> bool:
        body = self._body(alert)
        refusals = 0
        delay = self._backoff_first
        while True:
            ok, transient, retry_after, what = self._post(body)
            if ok:
                self.delivered += 1
                return True
            self.failures += 1
            if not transient:
                refusals += 1
                if refusals > self._retries:
                    self.dropped += 1
                    self._log(
                        f"watch: webhook refused alert {alert.id} ({alert.rule}) {refusals} times "
                        f"({what}); dropped it: {render_line(alert)}"
                    )
                    return True
            wait = retry_after if retry_after is not None else delay * random.uniform(0.8, 1.2)
            self._log(
                f"watch: webhook delivery of {alert.id} failed ({what}); retrying in {wait:.2f}s"
            )
            if not self._sleep(min(wait, self._backoff_max)):
                return False
            delay = min(delay * 2, self._backoff_max)


class ExecSink(_QueuedSink):
    """Runs a shell command per alert, with the JSON payload on stdin.

    The command is the operator's own; alert content reaches it only through stdin and the
    ``HANDOFFSCOPE_ALERT_*`` environment variables, never through the command line. A failing
    command is reported, not retried (it may have had side effects).
    """

    name = "exec"

    def __init__(
        self,
        command: str,
        *,
        timeout_s: float = DEFAULT_EXEC_TIMEOUT_S,
        outbox_size: int = DEFAULT_OUTBOX_SIZE,
        log: Log = log_stderr,
    ) -> None:
        self._command = command
        self._timeout = timeout_s
        super().__init__(outbox_size=outbox_size, log=log)

    def _deliver(self, alert: Alert) -> bool:
        env = dict(os.environ)
        env.update(
            {
                ev.HANDOFFSCOPE_ALERT_ID: alert.id,
                ev.HANDOFFSCOPE_ALERT_RULE: alert.rule,
                ev.HANDOFFSCOPE_ALERT_STATUS: alert.status,
                ev.HANDOFFSCOPE_ALERT_SEVERITY: alert.severity,
            }
        )
        try:
            # A session of its own, so a timeout kills the shell and everything it started.
            proc = subprocess.Popen(
                self._command,
                shell=True,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                start_new_session=True,
            )
        except OSError as e:
            self._log(f"watch: --exec command could not start: {e}")
            return True
        try:
            _, err = proc.communicate(render_json(alert) + "\n", timeout=self._timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            self._log(
                f"watch: --exec command timed out after {self._timeout:g}s on alert {alert.id}"
            )
            return True
        self.delivered += 1
        if proc.returncode != 0:
            detail = err.strip().splitlines()[-1:] or [""]
            self._log(
                f"watch: --exec command exited {proc.returncode} on alert {alert.id}: {detail[0]}"
            )
        return True


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # A redirected POST turns into a GET without the alert; refuse it and say where it went.
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff
