-- id: accept-without-eta
-- severity: warning
-- summary: A receiver accepted a proposal without an estimated completion time.
-- why: The ETA is what lets the sender plan and notice a stalled task. A receiver that
--   cannot estimate must reject with cannot_estimate instead of accepting open-ended work.
SELECT
    trace_id,
    span_id,
    "handoff.task_id" AS task_id,
    "handoff.idempotency_key" AS idempotency_key,
    "handoff.sender" AS sender,
    "handoff.receiver" AS receiver,
    attempt_no AS attempt,
    "handoff.eta_ms" AS value,
    format('{} accepted {} (attempt {}) with {}',
           coalesce("handoff.receiver", 'the receiver'), coalesce("handoff.task_id", 'a task'),
           attempt_no,
           CASE WHEN "handoff.eta_ms" IS NULL THEN 'no ETA'
                ELSE format('an unusable ETA of {} ms', "handoff.eta_ms") END) AS message
FROM hs_phases_all
WHERE name = 'handoff.validate'
  AND "handoff.decision" = 'accept'
  AND ("handoff.eta_ms" IS NULL OR "handoff.eta_ms" < 0 OR NOT isfinite("handoff.eta_ms"))
QUALIFY row_number() OVER (PARTITION BY handoff_key ORDER BY attempt_no, start_unix_nano) = 1
