"""The conformance kit: the protocol's scenarios, run against any receiver endpoint.

``run(url, token=...)`` plays each scenario over real HTTP and returns one ``Outcome`` per
scenario. The receiver under test must keep the contract of ``collector.http.conformance``
(what a proposal's ``payload.conformance`` asks for). Every scenario uses fresh handoff ids
and idempotency keys, so the kit can run again and again against one long-lived receiver.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from collector import schema
from collector.http import wire
from collector.http.conformance import CONTRACT_FIELD, OUTPUT_SCHEMA, UNKNOWN_SCHEMA
from collector.messages import CommitRequest, OutputSchema, Proposal, VoidNotice, fingerprint

__all__ = ["SCENARIOS", "Outcome", "Scenario", "Skipped", "play", "run"]


class Failed(Exception):
    """A scenario's expectation did not hold; the message says what was seen."""


class Skipped(Exception):
    """A scenario could not be judged against this endpoint; the message says why."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """One scenario's result."""

    scenario: str
    passed: bool
    detail: str
    elapsed_ms: float
    skipped: bool = False
    """Not judged (e.g. no token to test authentication with): neither passed nor failed."""

    @property
    def verdict(self) -> str:
        """``PASS``, ``FAIL`` or ``SKIP``."""
        return "SKIP" if self.skipped else ("PASS" if self.passed else "FAIL")

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "scenario": self.scenario,
            "passed": self.passed,
            "skipped": self.skipped,
            "detail": self.detail,
            "elapsed_ms": round(self.elapsed_ms, 1),
        }


class Peer:
    """The endpoint under test, seen through raw HTTP."""

    def __init__(self, client: httpx.Client, token: str | None) -> None:
        self.client = client
        self.token = token
        self.run = uuid.uuid4().hex[:12]
        self._issued = 0

    def ids(self) -> tuple[str, str]:
        """A fresh (handoff id, idempotency key)."""
        self._issued += 1
        return f"conf-{self.run}-{self._issued}", f"conf-key-{self.run}-{self._issued}"

    def headers(self, *, auth: bool = True) -> dict[str, str]:
        h = {"content-type": wire.CONTENT_TYPE}
        if auth and self.token:
            h["authorization"] = f"Bearer {self.token}"
        return h

    def post(self, kind: str, message: dict[str, Any], *, auth: bool = True) -> httpx.Response:
        return self.client.post(wire.ROUTES[kind], json=message, headers=self.headers(auth=auth))

    def reply(self, kind: str, message: dict[str, Any], expect_kind: str) -> dict[str, Any]:
        """POST and return the 200 reply of ``expect_kind``, or fail naming what came."""
        response = self.post(kind, message)
        body = _json(response)
        if response.status_code != 200:
            raise Failed(f"{kind}: expected 200, got {response.status_code} {shorten(body)}")
        if not isinstance(body, dict) or body.get("kind") != expect_kind:
            raise Failed(f"{kind}: expected a {expect_kind} reply, got {shorten(body)}")
        return body

    def proposal(self, handoff_id: str, key: str | None, **changes: Any) -> dict[str, Any]:
        payload = changes.pop("payload", {"topic": "conformance"})
        asks = changes.pop("asks", None)
        if asks:
            payload = {**payload, CONTRACT_FIELD: asks}
        fields: dict[str, Any] = {
            "handoff_id": handoff_id,
            "task_id": f"task-{handoff_id}",
            "attempt": 1,
            "sender": "conformance-kit",
            "receiver": "under-test",
            "output_schema": OutputSchema.parse(OUTPUT_SCHEMA),
            "deadline_unix_ms": int(time.time() * 1000) + 120_000,
            "idempotency_key": key,
            "payload": payload,
            "payload_fingerprint": fingerprint(payload),
        }
        fields.update(changes)
        return Proposal(**fields).to_dict()

    def commit(self, proposal: dict[str, Any], **changes: Any) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "handoff_id": proposal["handoff_id"],
            "task_id": proposal["task_id"],
            "attempt": proposal["attempt"],
            "sender": proposal["sender"],
            "receiver": proposal["receiver"],
            "idempotency_key": proposal["idempotency_key"],
            "payload": proposal["payload"],
            "payload_fingerprint": fingerprint(proposal["payload"]),
        }
        fields.update(changes)
        return CommitRequest(**fields).to_dict()

    def accepted(self, **changes: Any) -> dict[str, Any]:
        """A proposal the receiver accepted (fails the scenario otherwise)."""
        handoff_id, key = self.ids()
        p = self.proposal(handoff_id, key, **changes)
        answer = self.reply("propose", p, "answer")
        expect(answer.get("decision") == "accept", f"expected an accept, got {shorten(answer)}")
        return p


def expect(condition: bool, failure: str) -> None:
    """Fail the scenario with ``failure`` unless ``condition``."""
    if not condition:
        raise Failed(failure)


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text[:120]


def shorten(value: Any) -> str:
    """``value`` as text of at most 160 characters, for a failure message."""
    text = str(value)
    return text if len(text) <= 160 else text[:157] + "..."


def expect_refused(result: dict[str, Any], error: str, what: str) -> None:
    """Fail unless the commit ``result`` was refused with ``error``; ``what`` names the step."""
    expect(
        result.get("outcome") == schema.OUTCOME_REFUSED and result.get("error") == error,
        f"{what}: expected outcome refused with error {error}, got {shorten(result)}",
    )


# ---------------------------------------------------------------------- scenarios
def health(peer: Peer) -> str:
    response = peer.client.get(wire.ROUTE_HEALTH)
    expect(response.status_code == 200, f"GET {wire.ROUTE_HEALTH}: {response.status_code}")
    return "200"


def accept_with_eta(peer: Peer) -> str:
    handoff_id, key = peer.ids()
    p = peer.proposal(handoff_id, key, asks={"eta_ms": 1500})
    answer = peer.reply("propose", p, "answer")
    expect(answer.get("decision") == "accept", f"expected accept, got {shorten(answer)}")
    eta = answer.get("eta_ms")
    expect(isinstance(eta, int) and eta >= 0, f"an accept needs eta_ms >= 0, got {eta!r}")
    expect(
        answer.get("handoff_id") == handoff_id and answer.get("attempt") == 1,
        f"the answer must echo handoff_id and attempt, got {shorten(answer)}",
    )
    result = peer.reply("commit", peer.commit(p), "commit_result")
    expect(result.get("outcome") == schema.OUTCOME_EXECUTED, f"commit: {shorten(result)}")
    return f"accept, eta_ms={eta}; commit executed"


def reject_with_reason(peer: Peer) -> str:
    handoff_id, key = peer.ids()
    reason = schema.REJECT_RESOURCE_UNAVAILABLE
    p = peer.proposal(handoff_id, key, asks={"reject": reason})
    answer = peer.reply("propose", p, "answer")
    expect(
        answer.get("decision") == "reject" and answer.get("reason") == reason,
        f"expected reject with reason {reason}, got {shorten(answer)}",
    )
    result = peer.reply("commit", peer.commit(p), "commit_result")
    expect_refused(result, schema.COMMIT_ERROR_WITHOUT_ACCEPT, "commit after a reject")
    return f"reject, reason={reason}; commit refused"


def missing_key(peer: Peer) -> str:
    handoff_id, _ = peer.ids()
    answer = peer.reply("propose", peer.proposal(handoff_id, None), "answer")
    expect(
        answer.get("decision") == "reject"
        and answer.get("reason") == schema.REJECT_MISSING_IDEMPOTENCY_KEY,
        f"expected reject missing_idempotency_key, got {shorten(answer)}",
    )
    return "reject, reason=missing_idempotency_key"


def schema_mismatch(peer: Peer) -> str:
    handoff_id, key = peer.ids()
    p = peer.proposal(handoff_id, key, output_schema=OutputSchema.parse(UNKNOWN_SCHEMA))
    answer = peer.reply("propose", p, "answer")
    expect(
        answer.get("decision") == "reject"
        and answer.get("reason") == schema.REJECT_SCHEMA_MISMATCH,
        f"expected reject schema_mismatch for {UNKNOWN_SCHEMA}, got {shorten(answer)}",
    )
    return "reject, reason=schema_mismatch"


def timeout(peer: Peer) -> str:
    handoff_id, key = peer.ids()
    clock_ms, delay_ms = 200, 500
    p = peer.proposal(handoff_id, key, validation_timeout_ms=clock_ms, asks={"delay_ms": delay_ms})
    started = time.monotonic()
    answer = peer.reply("propose", p, "answer")
    took_ms = (time.monotonic() - started) * 1000
    expect(took_ms > clock_ms, f"the receiver did not wait delay_ms ({took_ms:.0f} ms)")
    # The receiver answered after the clock by its own measure: its accept is void even
    # before the sender says so, and stays void once it does.
    result = peer.reply("commit", peer.commit(p), "commit_result")
    expect_refused(result, schema.COMMIT_ERROR_WITHOUT_ACCEPT, "commit of a late-answered attempt")
    peer.reply("void", VoidNotice(handoff_id, 1, "validation timeout").to_dict(), "void")
    result = peer.reply("commit", peer.commit(p), "commit_result")
    expect_refused(result, schema.COMMIT_ERROR_WITHOUT_ACCEPT, "commit of a voided attempt")
    return f"late {answer.get('decision')} after {took_ms:.0f} ms; commits refused"


def replay(peer: Peer) -> str:
    p = peer.accepted()
    first = peer.reply("commit", peer.commit(p), "commit_result")
    expect(first.get("outcome") == schema.OUTCOME_EXECUTED, f"first commit: {shorten(first)}")
    second = peer.reply("commit", peer.commit(p), "commit_result")
    expect(second.get("outcome") == schema.OUTCOME_REPLAYED, f"second commit: {shorten(second)}")
    expect(
        second.get("result") == first.get("result") and second.get("status") == first.get("status"),
        f"a replay must return the stored result: {shorten(first)} then {shorten(second)}",
    )
    return "executed, then replayed with the same result"


def payload_conflict(peer: Peer) -> str:
    p = peer.accepted()
    other = {"topic": "a different payload"}
    result = peer.reply("commit", peer.commit(p, payload=other), "commit_result")
    expect_refused(result, schema.COMMIT_ERROR_IDEMPOTENCY_CONFLICT, "commit with another payload")
    done = peer.reply("commit", peer.commit(p), "commit_result")
    expect(done.get("outcome") == schema.OUTCOME_EXECUTED, f"commit: {shorten(done)}")
    handoff_id, _ = peer.ids()
    reused = peer.proposal(handoff_id, p["idempotency_key"], payload=other)
    answer = peer.reply("propose", reused, "answer")
    expect(
        answer.get("decision") == "reject"
        and answer.get("reason") == schema.REJECT_DUPLICATE_KEY_CONFLICT,
        f"a used key with another payload: expected duplicate_key_conflict, got {shorten(answer)}",
    )
    return "commit refused IdempotencyConflict; re-proposal rejected duplicate_key_conflict"


def commit_without_accept(peer: Peer) -> str:
    handoff_id, key = peer.ids()
    result = peer.reply("commit", peer.commit(peer.proposal(handoff_id, key)), "commit_result")
    expect_refused(result, schema.COMMIT_ERROR_WITHOUT_ACCEPT, "commit of a never-proposed handoff")
    return "refused CommitWithoutAccept"


def void(peer: Peer) -> str:
    p = peer.accepted()
    notice = VoidNotice(p["handoff_id"], 1, "cancelled by the kit").to_dict()
    echo = peer.reply("void", notice, "void")
    expect(echo.get("handoff_id") == p["handoff_id"], f"void echo: {shorten(echo)}")
    result = peer.reply("commit", peer.commit(p), "commit_result")
    expect_refused(result, schema.COMMIT_ERROR_WITHOUT_ACCEPT, "commit after void")
    return "void echoed; commit refused"


def malformed(peer: Peer) -> str:
    handoff_id, key = peer.ids()
    p = peer.proposal(handoff_id, key)
    p["attempt"] = "first"
    response = peer.post("propose", p)
    body = _json(response)
    expect(response.status_code == 400, f"expected 400, got {response.status_code}")
    expect(
        isinstance(body, dict) and body.get("field") == "/attempt",
        f"the 400 must name field /attempt, got {shorten(body)}",
    )
    del p["attempt"]
    response = peer.post("propose", p)
    body = _json(response)
    expect(
        response.status_code == 400 and isinstance(body, dict) and body.get("field") == "/attempt",
        "a missing field: expected 400 naming /attempt, got "
        f"{response.status_code} {shorten(body)}",
    )
    return "400 naming /attempt"


def unauthorized(peer: Peer) -> str:
    if not peer.token:
        raise Skipped("no token given (--token-env), so authentication was not tested")
    handoff_id, key = peer.ids()
    response = peer.post("propose", peer.proposal(handoff_id, key), auth=False)
    expect(response.status_code == 401, f"no token: expected 401, got {response.status_code}")
    return "401 without the token"


@dataclass(frozen=True, slots=True)
class Scenario:
    """A named scenario and what it checks."""

    name: str
    checks: str
    play: Callable[[Peer], str]


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("health", "GET /healthz answers 200", health),
    Scenario("accept-with-eta", "an accept carries an ETA; its commit executes", accept_with_eta),
    Scenario("reject-with-reason", "a reject carries its reason code", reject_with_reason),
    Scenario("missing-key", "no idempotency key: reject missing_idempotency_key", missing_key),
    Scenario(
        "schema-mismatch", "an unknown output schema: reject schema_mismatch", schema_mismatch
    ),
    Scenario("timeout", "an accept sent after the clock cannot be committed", timeout),
    Scenario("replay", "a second commit replays the stored result", replay),
    Scenario("payload-conflict", "one key, another payload: refused", payload_conflict),
    Scenario("commit-without-accept", "a commit never accepted is refused", commit_without_accept),
    Scenario("void", "a voided accept cannot be committed", void),
    Scenario("malformed", "a malformed message gets 400 naming the field", malformed),
    Scenario("unauthorized", "a request without the token gets 401", unauthorized),
)
"""Every scenario, in the order they run."""


def run(
    url: str,
    *,
    token: str | None = None,
    timeout_s: float = 10.0,
    only: tuple[str, ...] = (),
    transport: httpx.BaseTransport | None = None,
) -> list[Outcome]:
    """Play the scenarios (all, or those named in ``only``) against ``url``."""
    with httpx.Client(base_url=url.rstrip("/"), timeout=timeout_s, transport=transport) as client:
        return play(Peer(client, token), SCENARIOS, only=only)


def play(
    peer: Any,
    scenarios: tuple[Scenario, ...],
    *,
    only: tuple[str, ...] = (),
    errors: tuple[type[Exception], ...] = (httpx.HTTPError,),
) -> list[Outcome]:
    """Play ``scenarios`` (all, or those named in ``only``) against ``peer``, in order.

    ``errors`` are the transport's failures: each fails its scenario, naming itself.
    Shared by every binding's kit (``collector.a2a.kit`` plays its own scenarios here).
    """
    outcomes = []
    for scenario in scenarios:
        if only and scenario.name not in only:
            continue
        started = time.monotonic()
        skipped = False
        try:
            detail, passed = scenario.play(peer), True
        except Skipped as e:
            detail, passed, skipped = str(e), False, True
        except Failed as e:
            detail, passed = str(e), False
        except errors as e:
            detail, passed = f"{type(e).__name__}: {e}", False
        elapsed = (time.monotonic() - started) * 1000
        outcomes.append(Outcome(scenario.name, passed, detail, elapsed, skipped))
    return outcomes
