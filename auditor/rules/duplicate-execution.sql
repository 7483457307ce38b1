-- id: duplicate-execution
-- severity: error
-- summary: One idempotency key was executed more than once by the same receiver.
-- why: Commit must be idempotent: a retried or duplicated commit returns the stored result
--   (recorded as replayed) and never runs the task again. Two executions mean a broken
--   idempotency store, and possibly an external effect done twice.
WITH commits AS (
    SELECT trace_id, span_id, attempt_no, start_unix_nano, "handoff.task_id",
           "handoff.idempotency_key", "handoff.sender", "handoff.receiver"
    FROM hs_phases_all
    WHERE name = 'handoff.commit'
      AND "handoff.commit.outcome" = 'executed'
      AND coalesce("handoff.idempotency_key", '') <> ''
), repeated AS (
    -- The few keys executed more than once: only their commits are numbered.
    SELECT "handoff.receiver", "handoff.idempotency_key"
    FROM commits
    GROUP BY ALL
    HAVING count(*) > 1
), executions AS (
    SELECT
        c.*,
        count(*) OVER (PARTITION BY c."handoff.receiver", c."handoff.idempotency_key") AS runs,
        row_number() OVER (PARTITION BY c."handoff.receiver", c."handoff.idempotency_key"
                           ORDER BY c.start_unix_nano, c.span_id) AS nth
    FROM commits AS c
    SEMI JOIN repeated AS r
        ON r."handoff.receiver" IS NOT DISTINCT FROM c."handoff.receiver"
       AND r."handoff.idempotency_key" = c."handoff.idempotency_key"
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
