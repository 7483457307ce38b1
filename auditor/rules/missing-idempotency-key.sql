-- id: missing-idempotency-key
-- severity: error
-- summary: A proposal carried no idempotency key.
-- why: Without a key the receiver cannot tell a retried commit from a new one, so a retry
--   may run the task twice. The protocol makes a missing key a validation failure; a key
--   must come from the sender and is never made up downstream.
SELECT
    trace_id,
    span_id,
    "handoff.task_id" AS task_id,
    NULL::VARCHAR AS idempotency_key,
    "handoff.sender" AS sender,
    "handoff.receiver" AS receiver,
    attempt_no AS attempt,
    NULL::DOUBLE AS value,
    format('{} proposed {} to {} (attempt {}) without an idempotency key',
           coalesce("handoff.sender", 'the sender'), coalesce("handoff.task_id", 'a task'),
           coalesce("handoff.receiver", 'the receiver'), attempt_no) AS message
FROM hs_phases_all
WHERE name = 'handoff.propose'
  AND coalesce("handoff.idempotency_key", '') = ''
QUALIFY row_number() OVER (PARTITION BY handoff_key ORDER BY attempt_no, start_unix_nano) = 1
