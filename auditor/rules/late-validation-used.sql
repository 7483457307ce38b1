-- id: late-validation-used
-- severity: error
-- summary: A commit was sent on a validation answer that arrived after the timeout.
-- why: At the timeout the proposal is void and the sender must treat the handoff as not
--   accepted; a late answer is recorded for alerting but never revives the proposal.
--   Committing on it breaks the clock the whole protocol relies on.
-- params: validation_timeout_ms
WITH late AS (
    SELECT handoff_key, attempt_no, latency_ms
    FROM hs_phases_all
    WHERE name = 'handoff.validate'
      AND coalesce("handoff.late",
                   round(latency_ms * 1000) > round($validation_timeout_ms * 1000), false)
      AND coalesce("handoff.late.decision", 'accept') = 'accept'
)
SELECT
    c.trace_id,
    c.span_id,
    c."handoff.task_id" AS task_id,
    c."handoff.idempotency_key" AS idempotency_key,
    c."handoff.sender" AS sender,
    c."handoff.receiver" AS receiver,
    c.attempt_no AS attempt,
    l.latency_ms AS value,
    format('{} committed {} (attempt {}) on an accept that came after {:.0f} ms',
           coalesce(c."handoff.sender", 'the sender'), coalesce(c."handoff.task_id", 'a task'),
           c.attempt_no, coalesce(l.latency_ms, 'NaN'::DOUBLE)) AS message
FROM hs_phases_all AS c
JOIN late AS l USING (handoff_key, attempt_no)
WHERE c.name = 'handoff.commit'
QUALIFY row_number() OVER (PARTITION BY c.handoff_key ORDER BY c.attempt_no, c.start_unix_nano) = 1
