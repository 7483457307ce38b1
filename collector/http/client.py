"""The handshake over HTTP, sending side: ``HttpChannel``, a channel on httpx (sync and async).

``HttpChannel(url, peer="writer")`` is a ``collector.Channel``: give it to ``Sender.handoff``
or ``Sender.ahandoff``. It keeps one pooled connection set per client (one ``httpx.Client``
for the sync API, one ``httpx.AsyncClient`` for asyncio), and times each request by the
protocol's clocks rather than one fixed timeout:

* **propose**: the sender's validation clock decides, not the network: the sender stops
  waiting at ``validation_timeout_ms`` and voids the attempt whatever the socket does. The
  request itself may run ``late_answer_s`` longer, so that a late answer is still recorded
  with its true latency. A proposal that could not be delivered (connection refused, a
  pooled connection the server had closed) is sent again while the validation clock runs:
  a re-delivered proposal is answered the same way.
* **commit**: may run until the task's deadline (learnt from the proposal this channel sent)
  plus ``commit_grace_s``, or ``commit_timeout_s`` when the deadline is unknown. A commit that
  meets a connection error or a 5xx is sent again, the same message with the same idempotency
  key, up to ``retries`` times: the receiver runs a key once and replays its stored result.
  A 409 (another execution of the key is in flight) carries a ``commit_result`` (refused,
  ``CommitInProgress``): by default it is returned at once and the sender decides whether and
  when to ask again; with ``in_flight_wait_s`` the channel itself sends the commit again after
  each ``Retry-After`` for up to that long (within the commit's time) before returning it.
* **void**: short, and sent again on a transport error (voiding twice is harmless).

Any other 4xx raises ``HttpStatusError`` (with the server's code, detail and field); it is a
``HandoffscopeError``, so the sender does not resend a commit the server refused to read.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from typing import Any

import httpx

from collector import __version__, schema
from collector.commit_budget import CommitBudgets
from collector.errors import HandoffscopeError
from collector.http import wire
from collector.messages import Message, decode

__all__ = ["HttpChannel", "HttpStatusError"]

_RETRYABLE = (httpx.TransportError,)
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.RemoteProtocolError)


class HttpStatusError(HandoffscopeError):
    """The server answered a status the protocol does not carry a message in (400, 401, 413...)."""

    def __init__(self, status: int, body: Any, url: str) -> None:
        self.status = status
        self.code = body.get("error") if isinstance(body, dict) else None
        self.detail = body.get("detail") if isinstance(body, dict) else None
        self.field = body.get("field") if isinstance(body, dict) else None
        where = f" (field {self.field})" if self.field else ""
        said = self.detail or (str(body)[:200] if body else "no body")
        super().__init__(f"{url} answered {status} {self.code or ''}{where}: {said}".strip())


class HttpChannel:
    """A channel to a handshake receiver served over HTTP (see ``collector.http.server``).

    ``url`` is the base URL the app is served (or mounted) at. ``peer`` is the receiver's
    name; ``token`` the bearer token, if the server wants one. ``headers`` are added to
    every request. ``transport``/``async_transport`` replace httpx's (for tests and proxies).
    """

    def __init__(
        self,
        url: str,
        *,
        peer: str,
        token: str | None = None,
        connect_timeout_s: float = 2.0,
        late_answer_s: float = 30.0,
        commit_timeout_s: float = 300.0,
        commit_grace_s: float = 10.0,
        void_timeout_s: float = 5.0,
        in_flight_wait_s: float = 0.0,
        retries: int = 3,
        backoff_s: float = 0.05,
        max_connections: int = 100,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.peer = peer
        self.connect_timeout_s = connect_timeout_s
        self.late_answer_s = late_answer_s
        self.commit_timeout_s = commit_timeout_s
        self.commit_grace_s = commit_grace_s
        self.void_timeout_s = void_timeout_s
        self.in_flight_wait_s = in_flight_wait_s
        self.retries = retries
        self.backoff_s = backoff_s
        self._headers = {
            "content-type": wire.CONTENT_TYPE,
            "accept": wire.CONTENT_TYPE,
            "user-agent": f"handoffscope/{__version__}",
            **(headers or {}),
        }
        if token is not None:
            self._headers["authorization"] = f"Bearer {token}"
        self._limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self._transport = transport
        self._async_transport = async_transport
        self._lock = threading.Lock()  # the sender sends proposals from worker threads
        self._client: httpx.Client | None = None
        self._aclient: httpx.AsyncClient | None = None
        # Task deadlines by handoff id, from the proposals sent: a commit's time budget.
        self._budgets = CommitBudgets(timeout_s=commit_timeout_s, grace_s=commit_grace_s)

    def __repr__(self) -> str:
        return f"HttpChannel({self.url!r}, peer={self.peer!r})"

    # ------------------------------------------------------------------ Channel API
    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one message (its wire dict); return the reply's wire dict."""
        plan = self._plan(message)
        client = self._sync_client()
        attempt = 0
        while True:
            try:
                response = client.post(
                    plan.url, json=message, headers=plan.headers, timeout=plan.timeout
                )
            except _RETRYABLE as e:
                attempt += 1
                if not plan.resend(e, attempt):
                    raise
                time.sleep(plan.pause(attempt))
                continue
            decided = plan.judge(response, attempt)
            if decided is not None:
                return decided
            attempt += 1
            time.sleep(plan.pause(attempt, response))

    async def arequest(self, message: dict[str, Any]) -> dict[str, Any]:
        """``request()`` for asyncio."""
        plan = self._plan(message)
        client = self._async_client()
        attempt = 0
        while True:
            try:
                response = await client.post(
                    plan.url, json=message, headers=plan.headers, timeout=plan.timeout
                )
            except _RETRYABLE as e:
                attempt += 1
                if not plan.resend(e, attempt):
                    raise
                await asyncio.sleep(plan.pause(attempt))
                continue
            decided = plan.judge(response, attempt)
            if decided is not None:
                return decided
            attempt += 1
            await asyncio.sleep(plan.pause(attempt, response))

    def exchange(self, message: Message) -> Message:
        """``request()`` with message objects."""
        return decode(self.request(message.to_dict()))

    async def aexchange(self, message: Message) -> Message:
        """``arequest()`` with message objects."""
        return decode(await self.arequest(message.to_dict()))

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Close the sync client's pooled connections."""
        if self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        """Close both clients' pooled connections."""
        if self._aclient is not None:
            await self._aclient.aclose()
            self._aclient = None
        self.close()

    def __enter__(self) -> HttpChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> HttpChannel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ internals
    def _sync_client(self) -> httpx.Client:
        client = self._client
        if client is None:
            with self._lock:
                client = self._client
                if client is None:
                    client = httpx.Client(limits=self._limits, transport=self._transport)
                    self._client = client
        return client

    def _async_client(self) -> httpx.AsyncClient:
        if self._aclient is None:
            self._aclient = httpx.AsyncClient(limits=self._limits, transport=self._async_transport)
        return self._aclient

    def _plan(self, message: dict[str, Any]) -> _Plan:
        kind = message.get("kind")
        route = wire.ROUTES.get(kind) if isinstance(kind, str) else None
        if route is None or not isinstance(kind, str):
            raise HandoffscopeError(
                f"an HTTP channel sends {', '.join(wire.ROUTES)} messages, not {kind!r}"
            )
        headers = self._headers
        carrier = message.get("trace")
        if isinstance(carrier, dict) and carrier.get("traceparent"):
            # Also as headers, so HTTP middleware and proxies see the same trace.
            headers = {**headers, **{k: v for k, v in carrier.items() if isinstance(v, str)}}
        now = time.monotonic()
        connect = self.connect_timeout_s
        if kind == "propose":
            clock_s = _seconds(message.get("validation_timeout_ms"), 2.0)
            self._budgets.remember(message)
            budget = clock_s + self.late_answer_s
            timeout = httpx.Timeout(budget, connect=min(connect, clock_s), pool=clock_s)
            give_up = now + clock_s  # resend only while the validation clock runs
        elif kind == "commit":
            budget = self._budgets.budget(message)
            timeout = httpx.Timeout(budget, connect=connect)
            give_up = now + budget
        else:
            budget = self.void_timeout_s
            timeout = httpx.Timeout(budget, connect=min(connect, budget))
            give_up = now + budget
        return _Plan(self, kind, f"{self.url}{route}", headers, timeout, give_up)


class _Plan:
    """How one request is timed, resent and judged."""

    def __init__(
        self,
        channel: HttpChannel,
        kind: str,
        url: str,
        headers: dict[str, str],
        timeout: httpx.Timeout,
        give_up: float,
    ) -> None:
        self.channel = channel
        self.kind = kind
        self.url = url
        self.headers = headers
        self.timeout = timeout
        self.give_up = give_up
        self.in_flight_until = min(give_up, time.monotonic() + channel.in_flight_wait_s)

    def _time_left(self) -> bool:
        return time.monotonic() < self.give_up

    def resend(self, error: Exception, attempt: int) -> bool:
        """Whether to send again after a transport error."""
        if attempt > self.channel.retries or not self._time_left():
            return False
        if self.kind == "propose":
            # Only a connection that failed before an answer could start (refused, or a pooled
            # one the server had closed); a re-delivered proposal is answered the same way.
            # Read timeouts are the validation clock's business, not the transport's.
            return isinstance(error, _NOT_SENT)
        return True  # commit (same key: replayed) and void (idempotent)

    def pause(self, attempt: int, response: httpx.Response | None = None) -> float:
        if response is not None and response.status_code == 409:
            after = _retry_after(response)
            return max(0.0, min(after, self.in_flight_until - time.monotonic()))
        return min(self.channel.backoff_s * 2 ** (attempt - 1), 1.0)

    def judge(self, response: httpx.Response, attempt: int) -> dict[str, Any] | None:
        """The reply to return, None to send again, or raise."""
        status = response.status_code
        body = _body(response)
        if status == 200 and isinstance(body, dict):
            return body
        if status == 409 and self.kind == "commit" and isinstance(body, dict):
            if body.get("error") == schema.COMMIT_ERROR_IN_DOUBT:
                return body  # asking again gets the same answer until the key is resolved
            # In flight: ask again after Retry-After while the channel may wait, else the
            # commit_result (refused, CommitInProgress) is the answer.
            return None if time.monotonic() < self.in_flight_until else body
        if status >= 500 and self.kind != "propose":
            if attempt < self.channel.retries and self._time_left():
                return None
        raise HttpStatusError(status, body, self.url)


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text[:200]


def _retry_after(response: httpx.Response) -> float:
    value = response.headers.get(wire.HEADER_RETRY_AFTER, "")
    try:
        return max(0.0, float(value))
    except ValueError:
        return float(wire.IN_FLIGHT_RETRY_AFTER_S)


def _seconds(ms: Any, default: float) -> float:
    return ms / 1000 if isinstance(ms, (int, float)) and ms > 0 else default
