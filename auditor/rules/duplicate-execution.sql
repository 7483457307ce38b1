-- id: duplicate-execution
-- severity: error
-- summary: One idempotency key was executed more than once by the same receiver.
-- why: Commit must be idempotent: a retried or duplicated commit returns the stored result
--   (recorded as replayed) and never runs the task again. Two executions mean a broken
--   idempotency store, and possibly an external effect done twice.
WITH executions AS (
    SELECT
        *,
        count(*) OVER (PARTITION BY "handoff.receiver", "handoff.idempotency_key") AS runs,
        row_number() OVER (PARTITION BY "handoff.receiver", "handoff.idempotency_key"
                           ORDER BY start_unix_nano, span_id) AS nth
    FROM hs_phases_all
    WHERE name = 'handoff.commit'
      AND "handoff.commit.outcome" = 'executed'
      AND coalesce("handoff.idempotency_key", '') <> ''
)
SELECT
    trace_id,
    span_id,
    "handoff.task_id" AS task_id,
    "handoff.idempotency_key" AS idempotency_key,
    "handoff.sender" AS sender,
    "handoff.receiver" AS receiver,
    attempt_no AS attempt,
    runs::DOUBLE AS value,
    format('{} executed idempotency key {} {} times (task {}); later commits must replay',
           coalesce("handoff.receiver", 'the receiver'), "handoff.idempotency_key", runs,
           coalesce("handoff.task_id", 'unknown')) AS message
FROM executions
WHERE runs > 1 AND nth = 2
