"""The handshake over A2A, sending side: ``A2AChannel``, a channel on a2a-sdk's client.

``A2AChannel(url)`` reads the remote agent's Agent Card first and raises ``ExtensionMissing``
at once when the agent does not declare the handshake extension (or declares another version
of it), instead of a hang or a confusing task later. Its ``peer`` is the receiver's name from
the card. It is a ``collector.Channel``: give it to ``Sender.handoff`` or ``Sender.ahandoff``.

Each handshake message goes out as one A2A ``SendMessage`` (JSON-RPC, not streamed) with the
extension activated by the ``A2A-Extensions`` header, the message in ``metadata`` under the
extension's key and the W3C trace context also as ``traceparent``/``tracestate`` headers.
Timing and resending follow the HTTP binding (``collector.http.client``): a proposal waits for
the validation clock plus ``late_answer_s`` and is sent again only when it never left; a
commit may take until the task's deadline plus ``commit_grace_s`` and is sent again, the same
message under the same key, after a transport error or a ``store_unavailable`` answer.

a2a-sdk's client is asyncio; the channel runs it on one event loop of its own, on a daemon
thread, so the sync API works from the sender's worker threads and the async API from any
event loop. ``close()`` stops it.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Coroutine, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar

import httpx
from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, create_client
from a2a.client.client import Client
from a2a.client.errors import A2AClientError
from a2a.types.a2a_pb2 import AgentCard, Message, Part, Role, SendMessageRequest, Task
from a2a.utils.errors import A2AError

from collector import __version__
from collector.a2a import codec, extension
from collector.a2a.card import handshake_params
from collector.commit_budget import CommitBudgets
from collector.errors import ConfigurationError, HandoffscopeError
from collector.messages import Message as HandshakeMessage
from collector.messages import decode

__all__ = ["A2AChannel", "A2AHandshakeError", "A2ATransport"]

T = TypeVar("T")
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_RETRY_CODES = (extension.ERROR_STORE_UNAVAILABLE, extension.ERROR_INTERNAL)


class A2AHandshakeError(HandoffscopeError):
    """The agent answered with an error body (``code``, ``detail``, ``field``), not a reply."""

    def __init__(self, code: str | None, detail: str | None, field: str | None, url: str) -> None:
        self.code = code
        self.detail = detail
        self.field = field
        where = f" (field {field})" if field else ""
        super().__init__(f"{url} answered {code}{where}: {detail}")


class A2ATransport:
    """One A2A agent reached through a2a-sdk's client, on an event loop of its own.

    The lower layer of ``A2AChannel`` (and of the conformance kit): ``send()`` delivers one
    A2A message and returns the task it produced. ``card`` is the agent's Agent Card.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        connect_timeout_s: float = 2.0,
        max_connections: int = 100,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._headers = {"user-agent": f"handoffscope/{__version__}", **(headers or {})}
        if token is not None:
            self._headers["authorization"] = f"Bearer {token}"
        self._limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self._connect_timeout_s = connect_timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"handoffscope-a2a {self.url}", daemon=True
        )
        self._thread.start()
        self._http: httpx.AsyncClient | None = None
        self._client: Client | None = None
        try:
            self.card: AgentCard = self.run(self._open())
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ loop bridging
    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the transport's loop and wait for it (from any other thread)."""
        return self.submit(coro).result()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Start ``coro`` on the transport's loop."""
        if self._loop.is_closed():
            coro.close()
            raise HandoffscopeError(f"the A2A channel to {self.url} is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """``run()`` awaited from another event loop."""
        return await asyncio.wrap_future(self.submit(coro))

    # ------------------------------------------------------------------ A2A
    async def _open(self) -> AgentCard:
        timeout = httpx.Timeout(30.0, connect=self._connect_timeout_s)
        self._http = httpx.AsyncClient(limits=self._limits, timeout=timeout, headers=self._headers)
        try:
            card = await A2ACardResolver(self._http, self.url).get_agent_card()
        except (A2AError, httpx.HTTPError, ValueError) as e:
            raise HandoffscopeError(
                f"cannot read the Agent Card of {self.url}: {type(e).__name__}: {e}"
            ) from e
        self._client = await create_client(
            card, client_config=ClientConfig(streaming=False, httpx_client=self._http)
        )
        return card

    async def send(
        self,
        message: Message,
        *,
        timeout_s: float,
        activate: bool = True,
        headers: Mapping[str, str] | None = None,
    ) -> Task:
        """Send one A2A message (the extension activated unless ``activate=False``)."""
        assert self._client is not None
        params: dict[str, str] = {**self._headers, **(headers or {})}
        if activate:
            params[extension.HEADER_EXTENSIONS] = extension.EXTENSION_URI
        context = ClientCallContext(service_parameters=params, timeout=timeout_s)
        async for event in self._client.send_message(
            SendMessageRequest(message=message), context=context
        ):
            if event.HasField("task"):
                return event.task
            if event.HasField("message"):
                task = Task(id="", context_id=event.message.context_id)
                task.status.message.CopyFrom(event.message)
                return task
        raise HandoffscopeError(f"{self.url} sent no task and no message")

    def close(self) -> None:
        """Close the connections and stop the loop thread."""
        if self._loop.is_closed():
            return
        if self._http is not None and self._thread.is_alive():
            http, self._http = self._http, None
            try:
                asyncio.run_coroutine_threadsafe(http.aclose(), self._loop).result(5)
            except Exception:  # noqa: BLE001, S110 - closing is best effort
                pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._loop.is_running():
            self._loop.close()


def handshake_message(message: dict[str, Any]) -> Message:
    """One handshake message (its wire dict) as an A2A message carrying it in metadata."""
    codec.check_exact(message)
    kind = message.get("kind")
    handoff_id = message.get("handoff_id")
    return Message(
        message_id=uuid.uuid4().hex,
        context_id=handoff_id if isinstance(handoff_id, str) else "",
        role=Role.ROLE_USER,
        parts=[Part(text=f"handoffscope {kind} {handoff_id}")],
        metadata=codec.to_struct({extension.METADATA_KEY: message}),
        extensions=[extension.EXTENSION_URI],
    )


def reply_of(task: Task, url: str) -> dict[str, Any]:
    """The handshake reply a task carries; raise when it carries an error or nothing."""
    carried = codec.from_struct(task.metadata).get(extension.METADATA_KEY)
    if carried is None and task.status.HasField("message"):
        meta = codec.from_struct(task.status.message.metadata)
        carried = meta.get(extension.METADATA_KEY)
    if not isinstance(carried, dict):
        said = " ".join(p.text for p in task.status.message.parts if p.text)[:200]
        raise HandoffscopeError(
            f"the A2A agent at {url} answered without the handshake's metadata (task state "
            f"{_state_name(task)}{': ' + said if said else ''}); it does not apply "
            f"{extension.EXTENSION_URI}"
        )
    if "kind" not in carried and "error" in carried:
        raise A2AHandshakeError(
            str(carried.get("error")), carried.get("detail"), carried.get("field"), url
        )
    return carried


def _state_name(task: Task) -> str:
    from a2a.types.a2a_pb2 import TaskState

    return str(TaskState.Name(task.status.state))


class A2AChannel:
    """A channel to a handshake receiver served as an A2A agent (see ``collector.a2a``).

    ``url`` is the agent's base URL (where ``/.well-known/agent-card.json`` is served).
    ``peer`` defaults to the receiver name the card declares; ``token`` is a bearer token.
    Raises ``ExtensionMissing`` when the agent does not declare the extension.
    """

    def __init__(
        self,
        url: str,
        *,
        peer: str | None = None,
        token: str | None = None,
        connect_timeout_s: float = 2.0,
        late_answer_s: float = 30.0,
        commit_timeout_s: float = 300.0,
        commit_grace_s: float = 10.0,
        void_timeout_s: float = 5.0,
        retries: int = 3,
        backoff_s: float = 0.05,
        max_connections: int = 100,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.late_answer_s = late_answer_s
        self.commit_timeout_s = commit_timeout_s
        self.commit_grace_s = commit_grace_s
        self.void_timeout_s = void_timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.transport = A2ATransport(
            self.url,
            token=token,
            connect_timeout_s=connect_timeout_s,
            max_connections=max_connections,
            headers=headers,
        )
        try:
            self.params = handshake_params(self.transport.card, self.url)
        except BaseException:
            self.transport.close()
            raise
        declared = str(self.params.get("receiver") or self.transport.card.name)
        if peer is not None and peer != declared:
            self.transport.close()
            raise ConfigurationError(
                f"peer={peer!r}, but the A2A agent at {self.url} declares the receiver {declared!r}"
            )
        self.peer = declared
        self._budgets = CommitBudgets(timeout_s=commit_timeout_s, grace_s=commit_grace_s)

    def __repr__(self) -> str:
        return f"A2AChannel({self.url!r}, peer={self.peer!r})"

    # ------------------------------------------------------------------ Channel API
    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one message (its wire dict); return the reply's wire dict."""
        return self.transport.run(self._deliver(message))

    async def arequest(self, message: dict[str, Any]) -> dict[str, Any]:
        """``request()`` for asyncio."""
        return await self.transport.arun(self._deliver(message))

    def exchange(self, message: HandshakeMessage) -> HandshakeMessage:
        """``request()`` with message objects."""
        return decode(self.request(message.to_dict()))

    async def aexchange(self, message: HandshakeMessage) -> HandshakeMessage:
        """``arequest()`` with message objects."""
        return decode(await self.arequest(message.to_dict()))

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Close the connections and stop the channel's loop thread."""
        self.transport.close()

    async def aclose(self) -> None:
        """``close()`` from asyncio (it does not block the calling loop)."""
        await asyncio.to_thread(self.transport.close)

    def __enter__(self) -> A2AChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> A2AChannel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ internals
    async def _deliver(self, message: dict[str, Any]) -> dict[str, Any]:
        kind = message.get("kind")
        if kind not in extension.REQUEST_KINDS:
            raise HandoffscopeError(
                f"an A2A channel sends {', '.join(extension.REQUEST_KINDS)} messages, not {kind!r}"
            )
        a2a_message = handshake_message(message)
        headers: dict[str, str] = {}
        carrier = message.get("trace")
        if isinstance(carrier, dict) and carrier.get("traceparent"):
            headers = {k: v for k, v in carrier.items() if isinstance(v, str)}
        budget, give_up = self._budget(kind, message)
        attempt = 0
        while True:
            try:
                task = await self.transport.send(a2a_message, timeout_s=budget, headers=headers)
                return reply_of(task, self.url)
            except (A2AClientError, A2AHandshakeError) as e:
                attempt += 1
                if not self._resend(kind, e, attempt, give_up):
                    raise
            await asyncio.sleep(min(self.backoff_s * 2 ** (attempt - 1), 1.0))

    def _budget(self, kind: str, message: dict[str, Any]) -> tuple[float, float]:
        now = time.monotonic()
        if kind == "propose":
            clock_s = _seconds(message.get("validation_timeout_ms"), 2.0)
            self._budgets.remember(message)
            return clock_s + self.late_answer_s, now + clock_s
        if kind == "commit":
            budget = self._budgets.budget(message)
            return budget, now + budget
        return self.void_timeout_s, now + self.void_timeout_s

    def _resend(self, kind: str, error: Exception, attempt: int, give_up: float) -> bool:
        if attempt > self.retries or time.monotonic() >= give_up:
            return False
        if isinstance(error, A2AHandshakeError):
            # A store that cannot write now: the same key again later (never for a proposal,
            # whose answer the validation clock is waiting for).
            return kind != "propose" and error.code in _RETRY_CODES
        if kind == "propose":
            # Only a proposal that never left; a re-delivered one is answered the same way.
            return isinstance(error.__cause__, _NOT_SENT)
        return True  # commit (same key: replayed) and void (idempotent)


def _seconds(ms: Any, default: float) -> float:
    return ms / 1000 if isinstance(ms, (int, float)) and ms > 0 else default
