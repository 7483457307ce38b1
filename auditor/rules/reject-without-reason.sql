-- id: reject-without-reason
-- severity: warning
-- summary: A receiver rejected a proposal without a reason code.
-- why: The sender decides what to do next from the reason (retry later on
--   resource_unavailable, fix the payload on schema_mismatch, give up on
--   deadline_unreachable). A bare reject leaves it guessing.
SELECT
    trace_id,
    span_id,
    "handoff.task_id" AS task_id,
    "handoff.idempotency_key" AS idempotency_key,
    "handoff.sender" AS sender,
    "handoff.receiver" AS receiver,
    attempt_no AS attempt,
    NULL::DOUBLE AS value,
    format('{} rejected {} (attempt {}) without a reason code',
           coalesce("handoff.receiver", 'the receiver'), coalesce("handoff.task_id", 'a task'),
           attempt_no) AS message
FROM hs_phases_all
WHERE name = 'handoff.validate'
  AND "handoff.decision" = 'reject'
  AND coalesce("handoff.reject_reason", '') = ''
QUALIFY row_number() OVER (PARTITION BY handoff_key ORDER BY attempt_no, start_unix_nano) = 1
