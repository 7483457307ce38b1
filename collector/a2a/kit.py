"""The conformance kit over A2A: the HTTP binding's scenarios, played through a2a-sdk's client.

``run(url, token=...)`` plays each scenario against the A2A agent at ``url`` and returns one
``Outcome`` per scenario (the same type as ``collector.http.kit``). The protocol scenarios
(accept, reject with reason, deadline, duplicate commit, conflicting payload, void...) are
the HTTP kit's own functions, given a peer that carries each message in an A2A task; every
reply is also checked to end its task in the state ``docs/a2a.md`` maps it to. The A2A
scenarios check what only this binding has: the Agent Card's declaration, a plain message
(no extension) answered by an ordinary task, metadata ignored unless the extension is
activated, a malformed message refused naming the field, and the bearer token.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import httpx
from a2a.client.errors import A2AClientError
from a2a.types.a2a_pb2 import Message, Part, Role, Task, TaskState

from collector import schema
from collector.a2a import extension
from collector.a2a import schemas as a2a_schemas
from collector.a2a.card import ExtensionMissing, handshake_params
from collector.a2a.client import A2AHandshakeError, A2ATransport, handshake_message, reply_of
from collector.errors import HandoffscopeError
from collector.http import kit as http_kit
from collector.http.conformance import OUTPUT_SCHEMA
from collector.http.kit import Failed, Outcome, Scenario, Skipped, expect
from collector.http.schemas import InvalidMessage

__all__ = ["SCENARIOS", "Outcome", "Scenario", "run"]


class A2APeer(http_kit.Peer):
    """The agent under test, through a2a-sdk's client (the HTTP kit's ``Peer`` interface)."""

    def __init__(self, transport: A2ATransport, token: str | None, timeout_s: float) -> None:
        super().__init__(None, token)  # type: ignore[arg-type]
        self.transport = transport
        self.timeout_s = timeout_s

    def task(self, message: dict[str, Any], *, activate: bool = True) -> Task:
        """Send one handshake message; the task it produced."""
        a2a_message = handshake_message(message)
        return self.transport.run(
            self.transport.send(a2a_message, timeout_s=self.timeout_s, activate=activate)
        )

    def reply(self, kind: str, message: dict[str, Any], expect_kind: str) -> dict[str, Any]:
        """Send and return the reply of ``expect_kind``, or fail naming what came."""
        try:
            task = self.task(message)
            body = reply_of(task, self.transport.url)
        except (A2AHandshakeError, HandoffscopeError, A2AClientError) as e:
            raise Failed(f"{kind}: {e}") from e
        if body.get("kind") != expect_kind:
            raise Failed(f"{kind}: expected a {expect_kind} reply, got {http_kit.shorten(body)}")
        want = _expected_state(body)
        got = TaskState.Name(task.status.state)
        expect(got == want, f"{kind}: a {_what(body)} must end its task {want}, got {got}")
        return body


def _expected_state(body: dict[str, Any]) -> str:
    if body.get("kind") == "answer":
        return extension.STATE_OF_ANSWER.get(str(body.get("decision")), "?")
    if body.get("kind") == "commit_result":
        return extension.STATE_OF_OUTCOME.get(str(body.get("outcome")), "?")
    return "TASK_STATE_COMPLETED"


def _what(body: dict[str, Any]) -> str:
    return str(body.get("decision") or body.get("outcome") or body.get("kind"))


# ---------------------------------------------------------------------- A2A scenarios
def agent_card(peer: A2APeer) -> str:
    try:
        params = handshake_params(peer.transport.card, peer.transport.url)
    except ExtensionMissing as e:
        raise Failed(str(e)) from e
    try:
        a2a_schemas.validate("a2a-extension-params", params)
    except InvalidMessage as e:
        raise Failed(f"the extension's params: {e}") from e
    codes = params["reason_codes"]
    expect(
        isinstance(codes, list) and set(schema.REJECT_REASONS) <= set(codes),
        f"reason_codes must list every standard code, got {codes!r}",
    )
    schemas = params.get("output_schemas")
    expect(
        schemas is None or OUTPUT_SCHEMA in schemas,
        f"output_schemas must include {OUTPUT_SCHEMA}, got {schemas!r}",
    )
    return f"declares {extension.EXTENSION_URI} for receiver {params['receiver']!r}"


def plain_message(peer: A2APeer) -> str:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text="hello")])
    try:
        task = peer.transport.run(
            peer.transport.send(message, timeout_s=peer.timeout_s, activate=False)
        )
    except A2AClientError as e:
        raise Failed(f"a message without the extension got an error, not a task: {e}") from e
    state = TaskState.Name(task.status.state)
    expect(
        state not in ("TASK_STATE_UNSPECIFIED", "TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"),
        f"a plain message's task must end in its request, got {state}",
    )
    return f"an ordinary task, {state}"


def not_activated(peer: A2APeer) -> str:
    handoff_id, key = peer.ids()
    p = peer.proposal(handoff_id, key)
    task = peer.task(p, activate=False)
    try:
        body = reply_of(task, peer.transport.url)
    except A2AHandshakeError as e:
        expect(
            e.code == extension.ERROR_EXTENSION_NOT_ACTIVATED,
            f"expected error {extension.ERROR_EXTENSION_NOT_ACTIVATED}, got {e.code}",
        )
        # Nothing was accepted: a commit (activated, this time) is refused.
        result = peer.reply("commit", peer.commit(p), "commit_result")
        http_kit.expect_refused(result, schema.COMMIT_ERROR_WITHOUT_ACCEPT, "commit after it")
        return f"refused {e.code}; nothing accepted"
    except HandoffscopeError:
        return "ignored (an ordinary task without the handshake's metadata)"
    raise Failed(f"a proposal sent without activating the extension was answered: {body}")


def malformed(peer: A2APeer) -> str:
    handoff_id, key = peer.ids()
    p = peer.proposal(handoff_id, key)
    p["attempt"] = "first"
    task = peer.task(p)
    try:
        body = reply_of(task, peer.transport.url)
    except A2AHandshakeError as e:
        expect(e.field == "/attempt", f"the error must name field /attempt, got {e.field!r}")
        state = TaskState.Name(task.status.state)
        expect(state == "TASK_STATE_REJECTED", f"expected TASK_STATE_REJECTED, got {state}")
        return f"rejected {e.code} naming /attempt"
    raise Failed(f"a malformed proposal was answered: {http_kit.shorten(body)}")


def unauthorized(peer: A2APeer) -> str:
    if not peer.token:
        raise Skipped("no token given (--token-env), so authentication was not tested")
    request = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}}
    response = httpx.post(peer.transport.url + "/", json=request, timeout=peer.timeout_s)
    expect(response.status_code == 401, f"no token: expected 401, got {response.status_code}")
    return "401 without the token"


def _on_a2a(fn: Callable[[A2APeer], str]) -> Callable[[http_kit.Peer], str]:
    """An A2A scenario as the shared player calls it (it is handed an ``A2APeer``)."""

    def play(peer: http_kit.Peer) -> str:
        assert isinstance(peer, A2APeer)
        return fn(peer)

    play.__name__ = fn.__name__
    return play


_SHARED = {s.name: s for s in http_kit.SCENARIOS}

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "agent-card", "the Agent Card declares the extension with its params", _on_a2a(agent_card)
    ),
    Scenario(
        "plain-message",
        "a message without the extension gets an ordinary task",
        _on_a2a(plain_message),
    ),
    *(
        _SHARED[name]
        for name in (
            "accept-with-eta",
            "reject-with-reason",
            "missing-key",
            "schema-mismatch",
            "timeout",
            "replay",
            "payload-conflict",
            "commit-without-accept",
            "void",
        )
    ),
    Scenario(
        "not-activated",
        "handshake metadata is not acted on unless activated",
        _on_a2a(not_activated),
    ),
    Scenario("malformed", "a malformed message is rejected naming the field", _on_a2a(malformed)),
    Scenario("unauthorized", "a request without the token gets 401", _on_a2a(unauthorized)),
)
"""Every scenario, in the order they run."""


def run(
    url: str,
    *,
    token: str | None = None,
    timeout_s: float = 10.0,
    only: tuple[str, ...] = (),
) -> list[Outcome]:
    """Play the scenarios (all, or those named in ``only``) against the A2A agent at ``url``.

    Raises ``HandoffscopeError`` when the agent's card cannot be read at all.
    """
    transport = A2ATransport(url, token=token)
    try:
        peer = A2APeer(transport, token, timeout_s)
        return http_kit.play(
            peer, SCENARIOS, only=only, errors=(A2AClientError, HandoffscopeError, httpx.HTTPError)
        )
    finally:
        transport.close()
