"""The receiving side over A2A: an ``AgentExecutor`` that hands each message to a ``Receiver``.

One A2A ``SendMessage`` carries one handshake message (``propose``, ``commit`` or ``void``) in
its ``metadata`` under the extension's key; the executor answers with one task, in a final
state, whose status message and metadata carry the receiver's reply (see ``docs/a2a.md``):

* an accept completes the task, a reject rejects it (``TASK_STATE_REJECTED``);
* a commit executed or replayed completes it, with the result as an artifact; a failed
  commit fails it; a refused one rejects it;
* a message that is not a valid handshake message is rejected with an ``error`` body that
  names the field, as the HTTP binding's 400 does.

The ``Receiver`` does all the protocol's work, exactly as behind the HTTP binding: its
durable store, its leases and its own threads for plain validators and executors (they
never run on the server's event loop). A message without the extension (a plain A2A client)
gets an ordinary task: answered by ``plain`` when given, else rejected with a text that says
how to hand work to this agent.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.concurrency import run_in_threadpool

from collector import errors, schema
from collector.a2a import codec, extension
from collector.acceptor import Receiver
from collector.http import schemas
from collector.messages import Answer, CommitRequest, CommitResult, Proposal, decode
from collector.messages import Message as HandshakeMessage

__all__ = ["HandshakeExecutor", "PlainHandler"]

log = logging.getLogger("collector.a2a")

PlainHandler = Callable[[str], "str | Awaitable[str]"]
"""Answers a message sent without the extension: its text in, a reply text out."""

_TRACE_HEADERS = ("traceparent", "tracestate")
_NO_EXTENSION = (
    "This agent takes work through the handoffscope handshake, an A2A extension: activate "
    f"{extension.EXTENSION_URI} with the {extension.HEADER_EXTENSIONS} header and send a "
    f"propose message in metadata[{extension.METADATA_KEY!r}] (see docs/a2a.md)."
)


class HandshakeExecutor(AgentExecutor):
    """Serves ``receiver`` to A2A clients (wrap it in ``a2a_app``, or in your own routes).

    ``validate=False`` skips the JSON Schema check of incoming messages (the library's own
    decoder still names a bad field). ``plain`` answers messages sent without the extension.
    """

    def __init__(
        self, receiver: Receiver, *, validate: bool = True, plain: PlainHandler | None = None
    ) -> None:
        self.receiver = receiver
        self.validate = validate
        self.plain = plain
        self.on_loop = _is_async(receiver.validator) or _is_async(receiver.executor)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Answer one A2A message with one task in a final state."""
        incoming = context.message
        carried: Any = None
        if incoming is not None and extension.METADATA_KEY in incoming.metadata:
            carried = codec.from_struct(incoming.metadata).get(extension.METADATA_KEY)
        if incoming is None or extension.METADATA_KEY not in incoming.metadata:
            await event_queue.enqueue_event(await self._plain(context))
            return
        if extension.EXTENSION_URI not in context.requested_extensions:
            reply: dict[str, Any] = _error(
                extension.ERROR_EXTENSION_NOT_ACTIVATED,
                f"the message carries {extension.METADATA_KEY} metadata but the request did "
                f"not activate the extension: send the header "
                f"'{extension.HEADER_EXTENSIONS}: {extension.EXTENSION_URI}'",
            )
            await event_queue.enqueue_event(_task(context, reply, TaskState.TASK_STATE_REJECTED))
            return
        reply, state = await self._answer(carried, context)
        await event_queue.enqueue_event(_task(context, reply, state))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Every task ends in the request that started it: there is nothing to cancel.

        To give up on an accepted attempt, send a ``void`` message.
        """
        from a2a.utils.errors import TaskNotCancelableError

        raise TaskNotCancelableError(
            message="handshake tasks end in their own request; send a void message instead"
        )

    # ------------------------------------------------------------------ steps
    async def _answer(self, value: Any, context: RequestContext) -> tuple[dict[str, Any], int]:
        try:
            message = self._message(value)
        except schemas.InvalidMessage as e:
            return _error(extension.ERROR_INVALID_MESSAGE, e.detail, e.field), _REJECTED
        except errors.MessageError as e:
            return _error(extension.ERROR_INVALID_MESSAGE, str(e)), _REJECTED
        message = _with_header_trace(message, context)
        try:
            reply = await self._respond(message)
        except errors.StoreError as e:
            # The store cannot keep a promise now: the sender may send the same key again.
            log.error("handoffscope: %s over A2A failed: %s", message.kind, e)
            return _error(extension.ERROR_STORE_UNAVAILABLE, str(e)), _FAILED
        except Exception as e:  # noqa: BLE001 - a failed task with a log line, never a traceback
            log.exception("handoffscope: %s over A2A failed", message.kind)
            return _error(extension.ERROR_INTERNAL, f"{type(e).__name__} in the receiver"), _FAILED
        return reply.to_dict(), _state_of(reply)

    def _message(self, value: Any) -> HandshakeMessage:
        kind = value.get("kind") if isinstance(value, dict) else None
        if kind not in extension.REQUEST_KINDS:
            raise schemas.InvalidMessage(
                f"kind must be one of {', '.join(extension.REQUEST_KINDS)}, got {kind!r}",
                field="/kind",
            )
        if self.validate:
            schemas.validate(kind, value)
        return decode(value)

    async def _respond(self, message: HandshakeMessage) -> HandshakeMessage:
        if self.on_loop:
            return await self.receiver.arespond(message)
        return await run_in_threadpool(self.receiver.respond, message)

    async def _plain(self, context: RequestContext) -> Task:
        if self.plain is None:
            return _text_task(context, _NO_EXTENSION, TaskState.TASK_STATE_REJECTED)
        text = self.plain(context.get_user_input())
        if inspect.isawaitable(text):
            text = await text
        return _text_task(context, str(text), TaskState.TASK_STATE_COMPLETED)


_REJECTED = TaskState.TASK_STATE_REJECTED
_FAILED = TaskState.TASK_STATE_FAILED


def _state_of(reply: HandshakeMessage) -> int:
    if isinstance(reply, Answer):
        name = extension.STATE_OF_ANSWER[reply.decision]
    elif isinstance(reply, CommitResult):
        name = extension.STATE_OF_OUTCOME.get(reply.outcome, "TASK_STATE_FAILED")
    else:  # void echoed, two-step ack
        name = "TASK_STATE_COMPLETED"
    return int(TaskState.Value(name))


def _summary(reply: dict[str, Any]) -> str:
    """One human line for the status message, beside the metadata a program reads."""
    kind = reply.get("kind")
    if kind == "answer":
        if reply.get("decision") == schema.DECISION_ACCEPT:
            return f"accepted, eta_ms={reply.get('eta_ms')}"
        return f"rejected: {reply.get('reason')}"
    if kind == "commit_result":
        error = reply.get("error")
        return f"commit {reply.get('outcome')}" + (f": {error}" if error else "")
    if kind == "void":
        return "voided"
    if "error" in reply:
        return f"{reply['error']}: {reply.get('detail', '')}"
    return str(kind)


def _task(context: RequestContext, reply: dict[str, Any], state: int) -> Task:
    meta = codec.to_struct({extension.METADATA_KEY: reply})
    status = Message(
        message_id=f"{context.task_id}-reply",
        context_id=context.context_id or "",
        task_id=context.task_id or "",
        role=Role.ROLE_AGENT,
        parts=[Part(text=_summary(reply))],
        metadata=meta,
        extensions=[extension.EXTENSION_URI],
    )
    task = Task(
        id=context.task_id or "",
        context_id=context.context_id or "",
        status=TaskStatus(state=state, message=status),  # type: ignore[arg-type]
        metadata=meta,
    )
    if context.message is not None:
        task.history.append(context.message)
    if reply.get("kind") == "commit_result" and reply.get("result") is not None:
        result = Part(media_type="application/json")
        result.data.CopyFrom(_value(reply["result"]))
        task.artifacts.append(Artifact(artifact_id=f"{context.task_id}-result", parts=[result]))
        task.artifacts[0].name = "result"
    return task


def _text_task(context: RequestContext, text: str, state: int) -> Task:
    status = Message(
        message_id=f"{context.task_id}-reply",
        context_id=context.context_id or "",
        task_id=context.task_id or "",
        role=Role.ROLE_AGENT,
        parts=[Part(text=text)],
    )
    task = Task(
        id=context.task_id or "",
        context_id=context.context_id or "",
        status=TaskStatus(state=state, message=status),  # type: ignore[arg-type]
    )
    if context.message is not None:
        task.history.append(context.message)
    return task


def _value(value: Any) -> Any:
    from google.protobuf import struct_pb2

    holder = struct_pb2.Struct()
    holder.update({"v": value})
    return holder.fields["v"]


def _error(code: str, detail: str, field: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"error": code, "detail": detail}
    if field is not None:
        body["field"] = field
    body["protocol_version"] = extension.PROTOCOL_VERSION
    return body


def _with_header_trace(message: HandshakeMessage, context: RequestContext) -> HandshakeMessage:
    """The message with the request headers' trace context when it carries none of its own."""
    if not isinstance(message, (Proposal, CommitRequest)) or message.trace:
        return message
    headers = context.call_context.state.get("headers") or {}
    carrier = {h: v for h in _TRACE_HEADERS if isinstance(v := headers.get(h), str) and v}
    if "traceparent" not in carrier:
        return message
    return dataclasses.replace(message, trace=carrier)


def _is_async(fn: Any) -> bool:
    if fn is None:
        return False
    call = type(fn).__call__ if not inspect.isroutine(fn) else None
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)
