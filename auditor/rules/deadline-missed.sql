-- id: deadline-missed
-- severity: warning
-- summary: The receiver finished a task after the proposal's deadline.
-- why: The deadline is part of what the receiver accepted. A result that lands after it may
--   be useless to the sender, and an ETA that did not hold makes every later plan wrong.
WITH deadlines AS (
    SELECT handoff_key, max("handoff.deadline_unix_ms") AS deadline_ms
    FROM hs_phases_all WHERE name = 'handoff.propose'
    GROUP BY handoff_key
)
SELECT
    c.trace_id,
    c.span_id,
    c."handoff.task_id" AS task_id,
    c."handoff.idempotency_key" AS idempotency_key,
    c."handoff.sender" AS sender,
    c."handoff.receiver" AS receiver,
    c.attempt_no AS attempt,
    (c.end_unix_nano // 1000000 - d.deadline_ms)::DOUBLE AS value,
    format('{} finished {} (attempt {}) {} ms after its deadline',
           coalesce(c."handoff.receiver", 'the receiver'), coalesce(c."handoff.task_id", 'a task'),
           c.attempt_no, c.end_unix_nano // 1000000 - d.deadline_ms) AS message
FROM hs_phases_all AS c
JOIN deadlines AS d USING (handoff_key)
WHERE c.name = 'handoff.commit'
  AND c."handoff.commit.outcome" IN ('executed', 'failed')
  AND c.end_unix_nano // 1000000 > d.deadline_ms
QUALIFY row_number() OVER (PARTITION BY c.handoff_key ORDER BY c.attempt_no, c.start_unix_nano) = 1
