"""The trace schema: every span name, attribute key and enum value handoffscope writes.

This module is the contract between the library that emits spans and everything that reads
them (the auditor's SQL, ``watch``, the dashboard). Every name is a ``Final`` constant; the
auditor's rules refer to the same strings, and a test checks that each ``handoff.*`` key a
rule uses is defined here. ``docs/trace-schema.md`` explains the contract in prose.

Layout of one handoff::

    invoke_workflow {name}          (optional root, gen_ai.operation.name=invoke_workflow)
    └── handoff                     (one per handoff; final state, attempts)
        ├── handoff.propose         (one per attempt; sender's work)
        ├── handoff.validate        (one per attempt; duration = validation latency)
        └── handoff.commit          (one per commit call; receiver's work)
    handoff.decision                (the orchestrator's recorded decision on a result)

Where the OpenTelemetry GenAI semantic conventions define a key, it is used as is
(``gen_ai.*``); everything specific to the handshake lives under ``handoff.*``.
"""

from __future__ import annotations

from typing import Final

SCHEMA_VERSION: Final = "1"
"""Version of this trace schema, written as ``handoff.schema_version`` on handoff spans."""

INSTRUMENTATION_NAME: Final = "handoffscope"
"""The instrumentation scope name of every tracer and meter the library creates."""

# --------------------------------------------------------------------------------------
# Span names
# --------------------------------------------------------------------------------------
SPAN_HANDOFF: Final = "handoff"
"""One span per handoff, parent of its phase spans."""
SPAN_PROPOSE: Final = "handoff.propose"
"""One span per proposal attempt; the sender's work."""
SPAN_VALIDATE: Final = "handoff.validate"
"""One span per validation round trip; its duration is the latency the sender saw."""
SPAN_COMMIT: Final = "handoff.commit"
"""One span per commit call (including replays and refusals); the receiver's work."""
SPAN_DECISION: Final = "handoff.decision"
"""The orchestrator's decision on a received result (retry, abort or proceed)."""
SPAN_WORKFLOW_PREFIX: Final = "invoke_workflow"
"""Workflow root spans are named ``invoke_workflow {workflow name}``."""

PHASE_SPANS: Final = (SPAN_PROPOSE, SPAN_VALIDATE, SPAN_COMMIT)
"""The phase span names, in protocol order."""

EVENT_TRANSITION: Final = "handoff.transition"
"""Span event recorded on every state change, with from, to and reason."""

# --------------------------------------------------------------------------------------
# Handshake attributes (handoff and phase spans)
# --------------------------------------------------------------------------------------
SCHEMA_VERSION_KEY: Final = "handoff.schema_version"
"""Version of this schema that wrote the span."""
TASK_ID: Final = "handoff.task_id"
"""The task being handed off; stable across retries."""
HANDOFF_ID: Final = "handoff.id"
"""Unique id of one handoff (one task, one sender, one receiver), stable across attempts."""
SENDER: Final = "handoff.sender"
"""Name of the agent that proposes."""
RECEIVER: Final = "handoff.receiver"
"""Name of the agent that validates and executes."""
ATTEMPT: Final = "handoff.attempt"
"""1-based attempt number of this proposal of the task."""
MAX_ATTEMPTS: Final = "handoff.max_attempts"
"""The retry cap in force (attempts, not retries: 3 means 2 retries)."""
IDEMPOTENCY_KEY: Final = "handoff.idempotency_key"
"""The commit's idempotency key; absent when the sender supplied none."""
PHASE: Final = "handoff.phase"
"""``propose | validate | commit`` on phase spans."""
STATE: Final = "handoff.state"
"""State after the phase (phase spans) or the final state (handoff span)."""
ATTEMPTS: Final = "handoff.attempts"
"""On the handoff span: how many attempts were made in all."""

# propose
OUTPUT_SCHEMA: Final = "handoff.schema"
"""Expected output schema as ``name@version``."""
PAYLOAD_VERSION: Final = "handoff.payload_version"
"""Version of the payload's own format."""
DEADLINE_UNIX_MS: Final = "handoff.deadline_unix_ms"
"""Absolute deadline for the task, milliseconds since the Unix epoch."""
PAYLOAD_FINGERPRINT: Final = "handoff.payload_fingerprint"
"""SHA-256 of the canonical JSON of the payload; the payload itself is never recorded."""

# validate
DECISION: Final = "handoff.decision"
"""``accept | reject | timeout``."""
ETA_MS: Final = "handoff.eta_ms"
"""On accept: the receiver's estimated completion time, in milliseconds."""
REJECT_REASON: Final = "handoff.reject_reason"
"""On reject: a reason code (see ``RejectReason``; custom codes allowed)."""
VALIDATION_TIMEOUT_MS: Final = "handoff.validation_timeout_ms"
"""The validation clock in force, in milliseconds (default 2000)."""
VALIDATION_LATENCY_MS: Final = "handoff.validation_latency_ms"
"""True latency of the answer in milliseconds, also when it arrived late."""
LATE: Final = "handoff.late"
"""True when the answer arrived after the validation timeout."""

# commit
COMMIT_OUTCOME: Final = "handoff.commit.outcome"
"""``executed | replayed | refused | failed``."""
RESULT_STATUS: Final = "handoff.result.status"
"""Status of the result: a message status or an envelope status."""
COMMIT_ERROR: Final = "handoff.commit.error"
"""On a refused or failed commit: the error type."""

# envelopes and effects
ENVELOPE_ID: Final = "handoff.envelope.id"
"""Id of the commitment envelope the receiver produced."""
ENVELOPE_STATUS: Final = "handoff.envelope.status"
"""``completed | blocked | verification_failed | held_for_approval | safe_stop``."""
ENVELOPE_BLOCKED_ON: Final = "handoff.envelope.blocked_on"
"""On ``blocked``: the missing input."""
ENVELOPE_FAILED_CHECK: Final = "handoff.envelope.failed_check"
"""On ``verification_failed``: the name of the check that failed."""
EXTERNAL_EFFECTS: Final = "handoff.external_effects"
"""Names of the external effects the task has (string array)."""
EXTERNAL_EFFECT_PERFORMED: Final = "handoff.external_effect.performed"
"""True when an external effect was actually carried out."""
APPROVAL: Final = "handoff.approval"
"""Who approved the external effects; absent when nobody did."""

# orchestrator decisions
POLICY_ACTION: Final = "handoff.policy.action"
"""``proceed | retry | abort``: what the orchestrator did with a result."""
POLICY_REASON: Final = "handoff.policy.reason"
"""Why, in words."""
CONSUMED_STATUS: Final = "handoff.consumed.status"
"""On a propose span: status of the upstream result this handoff consumes."""
CONSUMED_TASK_ID: Final = "handoff.consumed.task_id"
"""On a propose span: the upstream task whose result this handoff consumes."""

# transitions (span event attributes)
TRANSITION_FROM: Final = "handoff.transition.from"
"""State before the transition."""
TRANSITION_TO: Final = "handoff.transition.to"
"""State after the transition."""
TRANSITION_REASON: Final = "handoff.transition.reason"
"""Why the transition happened."""

# agents and roles
AGENT_LANES: Final = "handoff.agent.lanes"
"""What the agent declares it does (string array)."""
AGENT_NOT_LANES: Final = "handoff.agent.out_of_lane"
"""What the agent declares it does not do (string array)."""

# workflows
WORKFLOW_ID: Final = "handoff.workflow.id"
"""Id of one workflow run, stable across full-chain restarts."""
WORKFLOW_ATTEMPT: Final = "handoff.workflow.attempt"
"""1-based run of the whole chain; above 1 means the chain was restarted."""
WORKFLOW_OUTCOME: Final = "handoff.workflow.outcome"
"""``success | failure | aborted`` on the workflow root span."""
WORKFLOW_VOID_HANDOFFS: Final = "handoff.workflow.void_handoffs"
"""How many handoffs of the run ended void (set only when some did)."""
WORKFLOW_PROCEEDED_AFTER_VOID: Final = "handoff.workflow.proceeded_after_void"
"""Why the run went on although a handoff ended void: the decision the code recorded with
``Workflow.proceed_after_void``; without it, a run with a void handoff is not a success."""

# cost
COST_USD: Final = "handoff.cost_usd"
"""Cost of the phase's model usage in US dollars (phase spans only)."""

# --------------------------------------------------------------------------------------
# OpenTelemetry GenAI semantic-convention keys used as is
# --------------------------------------------------------------------------------------
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_WORKFLOW_NAME: Final = "gen_ai.workflow.name"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_AGENT_ID: Final = "gen_ai.agent.id"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
"""Input tokens read from the provider's prompt cache (inside the input tokens)."""
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
"""Input tokens written to the provider's prompt cache (inside the input tokens)."""
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
"""Output tokens spent reasoning (inside the output tokens)."""
OPERATION_CHAT: Final = "chat"
"""``gen_ai.operation.name`` of a model call (one model's usage within a phase)."""
GEN_AI_HANDOFF_SOURCE: Final = "gen_ai.agent.handoff.source.name"
"""Proposed GenAI key for the agent handing off (on the handoff span)."""
GEN_AI_HANDOFF_TARGET: Final = "gen_ai.agent.handoff.target.name"
"""Proposed GenAI key for the agent receiving (on the handoff span)."""
OPERATION_INVOKE_WORKFLOW: Final = "invoke_workflow"
OPERATION_HANDOFF: Final = "handoff"

# Other instrumentations' token and cost keys, read by the auditor (never written).
FOREIGN_INPUT_TOKEN_KEYS: Final = (
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
    "gen_ai.usage.input_tokens",
)
FOREIGN_OUTPUT_TOKEN_KEYS: Final = (
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
    "gen_ai.usage.output_tokens",
)
FOREIGN_COST_KEYS: Final = (
    "gen_ai.usage.cost",
    "llm.cost.total",
    "gen_ai.cost.total_cost",
    "operation.cost",
)

# --------------------------------------------------------------------------------------
# Metric names (OpenTelemetry metrics API)
# --------------------------------------------------------------------------------------
METRIC_VALIDATION_LATENCY: Final = "handoff.validation.duration"
"""Histogram, seconds, attributes: receiver, sender, decision."""
METRIC_PHASE_OUTCOMES: Final = "handoff.phase.outcomes"
"""Counter of phase outcomes, attributes: phase, outcome, reason."""
METRIC_TOKENS: Final = "handoff.tokens"
"""Counter of tokens, attributes: agent, phase, direction (input|output), model."""
METRIC_COST: Final = "handoff.cost"
"""Counter of cost in USD, attributes: agent, phase, model."""

# --------------------------------------------------------------------------------------
# Enum values
# --------------------------------------------------------------------------------------
STATE_PROPOSED: Final = "proposed"
STATE_VALIDATED: Final = "validated"
STATE_COMMITTED: Final = "committed"
STATE_VOID: Final = "void"
STATES: Final = (STATE_PROPOSED, STATE_VALIDATED, STATE_COMMITTED, STATE_VOID)

PHASE_PROPOSE: Final = "propose"
PHASE_VALIDATE: Final = "validate"
PHASE_COMMIT: Final = "commit"

DECISION_ACCEPT: Final = "accept"
DECISION_REJECT: Final = "reject"
DECISION_TIMEOUT: Final = "timeout"

OUTCOME_EXECUTED: Final = "executed"
OUTCOME_REPLAYED: Final = "replayed"
OUTCOME_REFUSED: Final = "refused"
OUTCOME_FAILED: Final = "failed"

REJECT_SCHEMA_MISMATCH: Final = "schema_mismatch"
REJECT_RESOURCE_UNAVAILABLE: Final = "resource_unavailable"
REJECT_MISSING_IDEMPOTENCY_KEY: Final = "missing_idempotency_key"
REJECT_DUPLICATE_KEY_CONFLICT: Final = "duplicate_key_conflict"
REJECT_CANNOT_ESTIMATE: Final = "cannot_estimate"
REJECT_DEADLINE_UNREACHABLE: Final = "deadline_unreachable"
REJECT_REASONS: Final = (
    REJECT_SCHEMA_MISMATCH,
    REJECT_RESOURCE_UNAVAILABLE,
    REJECT_MISSING_IDEMPOTENCY_KEY,
    REJECT_DUPLICATE_KEY_CONFLICT,
    REJECT_CANNOT_ESTIMATE,
    REJECT_DEADLINE_UNREACHABLE,
)
"""The documented reject reason codes; receivers may also send custom codes."""

MESSAGE_COMPLETE: Final = "complete"
MESSAGE_PARTIAL: Final = "partial"
MESSAGE_FAILED: Final = "failed"

ENVELOPE_COMPLETED: Final = "completed"
ENVELOPE_BLOCKED: Final = "blocked"
ENVELOPE_VERIFICATION_FAILED: Final = "verification_failed"
ENVELOPE_HELD_FOR_APPROVAL: Final = "held_for_approval"
ENVELOPE_SAFE_STOP: Final = "safe_stop"

POLICY_PROCEED: Final = "proceed"
POLICY_RETRY: Final = "retry"
POLICY_ABORT: Final = "abort"

WORKFLOW_SUCCESS: Final = "success"
WORKFLOW_FAILURE: Final = "failure"
WORKFLOW_ABORTED: Final = "aborted"

DEFAULT_VALIDATION_TIMEOUT_S: Final = 2.0
"""The validation clock: an answer later than this voids the proposal."""
DEFAULT_P95_BUDGET_S: Final = 0.5
"""The operational budget for p95 validation latency per receiver."""
DEFAULT_MAX_ATTEMPTS: Final = 3
"""Default retry cap: 2 retries, so 3 attempts per handoff."""

VERCEL_AI_INPUT_TOKEN_KEYS: Final = ("ai.usage.promptTokens",)
"""The Vercel AI SDK's input-token key, read by the auditor (never written)."""
VERCEL_AI_OUTPUT_TOKEN_KEYS: Final = ("ai.usage.completionTokens",)
"""The Vercel AI SDK's output-token key, read by the auditor (never written)."""

# --------------------------------------------------------------------------------------
# Added with the handshake library
# --------------------------------------------------------------------------------------
HANDOFF_MODE: Final = "handoff.mode"
"""``handshake | two-step | fire-and-forget`` on handoff and phase spans (see MODES)."""
LATE_DECISION: Final = "handoff.late.decision"
"""On a late validate span: what the late answer said (``accept | reject``); never acted on."""
ACKNOWLEDGED: Final = "handoff.acknowledged"
"""On a propose span: true when the receiver acknowledged the proposal (answer or ack)."""
COMMIT_DEADLINE_UNIX_MS: Final = "handoff.commit_deadline_unix_ms"
"""On an accepting validate span: until when a commit is honoured (presumed abort after)."""
POLICY_ATTEMPT: Final = "handoff.policy.attempt"
"""On a decision span: the attempt whose result was decided on."""
POLICY_MISSING_FIELDS: Final = "handoff.policy.missing_fields"
"""On a decision span: required message fields that were missing (string array)."""
MESSAGE_FINDINGS: Final = "handoff.message.findings"
"""On a decision span: how many findings the received message carried."""

MODE_HANDSHAKE: Final = "handshake"
MODE_TWO_STEP: Final = "two-step"
MODE_FIRE_AND_FORGET: Final = "fire-and-forget"
MODES: Final = (MODE_HANDSHAKE, MODE_TWO_STEP, MODE_FIRE_AND_FORGET)
"""Handoff modes; the non-handshake ones are legacy baselines the auditor flags."""

# Metric point attributes (besides handoff.phase, handoff.sender/receiver, gen_ai.agent.name,
# gen_ai.request.model and handoff.decision, which keep their span meaning)
METRIC_OUTCOME: Final = "handoff.outcome"
"""On ``handoff.phase.outcomes``: the phase's outcome (decision, commit outcome, action)."""
METRIC_REASON: Final = "handoff.reason"
"""On ``handoff.phase.outcomes``: the reject reason or commit error, when there is one."""
GEN_AI_TOKEN_TYPE: Final = "gen_ai.token.type"
"""On ``handoff.tokens``: ``input | output`` (the GenAI semantic-convention key)."""
PHASE_DECISION: Final = "decision"
"""``handoff.phase`` on ``handoff.phase.outcomes`` points counting orchestrator decisions."""
OUTCOME_SENT: Final = "sent"
"""``handoff.outcome`` of a proposal that left the sender (``handoff.phase.outcomes``)."""
OUTCOME_NO_ANSWER: Final = "no_answer"
"""``handoff.reason`` of a validation timeout where nothing usable came back at all."""

# handoff.commit.error values the library itself writes (a failed task writes its exception type)
COMMIT_ERROR_WITHOUT_ACCEPT: Final = "CommitWithoutAccept"
"""Refused: no valid accept for this attempt (never accepted, void, or past its deadline)."""
COMMIT_ERROR_IDEMPOTENCY_CONFLICT: Final = "IdempotencyConflict"
"""Refused: the key was used for a different payload."""
COMMIT_ERROR_LEGACY_MODE: Final = "LegacyModeRefused"
"""Refused: a two-step or fire-and-forget commit to a receiver that does not allow them."""
COMMIT_ERROR_IN_PROGRESS: Final = "CommitInProgress"
"""Refused: another execution of the key was still running when the wait ran out."""
REJECT_VALIDATOR_ERROR: Final = "validator_error"
"""Custom reject code the library sends when a receiver's own validator raised."""

# --------------------------------------------------------------------------------------
# Added with the sweep of expired accepts
# --------------------------------------------------------------------------------------
SPAN_EXPIRE: Final = "handoff.expire"
"""One span per accept the receiver voided because its commit deadline passed with no commit;
the receiver's, under the sender's trace."""
OUTCOME_EXPIRED: Final = "expired"
"""``handoff.outcome`` (phase ``commit``) of an accept voided because no commit came in time."""
REASON_ACCEPT_EXPIRED: Final = "commit deadline passed with no commit (expired)"
"""``handoff.transition.reason`` of the ``validated -> void`` move a sweep records."""

# --------------------------------------------------------------------------------------
# Added with leases, the receiver's own record and timeouts recorded when they fire
# --------------------------------------------------------------------------------------
SPAN_ANSWER: Final = "handoff.answer"
"""The receiver's own record of answering one proposal (its validator's run), a child of the
sender's ``handoff.validate`` span: the handshake is in the trace even if the sender dies."""
SPAN_LATE_ANSWER: Final = "handoff.late_answer"
"""An answer the sender received after its timeout, linked to the ``handoff.validate`` span
that already ended (void) when the clock fired; from proposal sent to answer received."""
COMMIT_ERROR_LEASE_LOST: Final = "LeaseLost"
"""``handoff.commit.error`` of an execution whose lease lapsed and was taken over before it
stored its result: fenced out, its result is neither stored nor reported as executed."""
COMMIT_GENERATION: Final = "handoff.commit.generation"
"""On a commit that took over a stale claim: the claim's generation (2 for the first
takeover of a key)."""
COMMIT_ERROR_IN_DOUBT: Final = "CommitInDoubt"
"""``handoff.commit.error`` of a commit whose key is in doubt: its task may have run (an owner
died or stalled mid-task, or its result could not be written) and no result is stored. It is
not run again until the result is stored or an operator resolves the key."""


# Added with the audit of other frameworks' traces
# --------------------------------------------------------------------------------------
MODE_FRAMEWORK: Final = "framework"
"""``mode`` the auditor gives a handoff another framework recorded (never written on spans):
it went through no handshake."""
