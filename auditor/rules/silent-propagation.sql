-- id: silent-propagation
-- severity: error
-- summary: A failed or partial result was passed downstream without a recorded decision.
-- why: The orchestrator must decide on every result (proceed, retry or abort) and record
--   why. A partial or failed result that flows on unexamined is how one agent's gap becomes
--   the whole workflow's wrong answer.
WITH consumers AS (
    -- Each handoff's first span (its first propose, or its first commit when it has none),
    -- with only the columns read below. An aggregate, not a window: a window over every
    -- phase span sorts them all, where the first of each handoff needs one pass.
    SELECT f.trace_id AS trace_id, f.span_id AS span_id, handoff_key,
           f.attempt_no AS attempt_no, f.start_unix_nano AS start_unix_nano,
           f.task_id AS "handoff.task_id", f.idempotency_key AS "handoff.idempotency_key",
           f.sender AS "handoff.sender", f.receiver AS "handoff.receiver",
           f.consumed_task_id AS "handoff.consumed.task_id",
           f.consumed_status AS "handoff.consumed.status"
    FROM (
        SELECT handoff_key,
               arg_min(struct_pack(trace_id := trace_id, span_id := span_id,
                                   attempt_no := attempt_no, start_unix_nano := start_unix_nano,
                                   task_id := "handoff.task_id",
                                   idempotency_key := "handoff.idempotency_key",
                                   sender := "handoff.sender", receiver := "handoff.receiver",
                                   consumed_task_id := "handoff.consumed.task_id",
                                   consumed_status := "handoff.consumed.status"),
                       -- A struct orders its NULL fields last, as ORDER BY does.
                       (attempt_no, name = 'handoff.commit', start_unix_nano)) AS f
        FROM hs_phases_all
        WHERE name IN ('handoff.propose', 'handoff.commit')
        GROUP BY handoff_key)
), results AS (
    -- Each handoff's final result: the last commit, a failed or refused one counting as failed.
    SELECT
        trace_id, handoff_key, "handoff.task_id" AS task_id, "handoff.receiver" AS receiver,
        end_unix_nano,
        CASE WHEN "handoff.commit.outcome" NOT IN ('executed', 'replayed') THEN 'failed'
             ELSE coalesce("handoff.result.status", 'complete') END AS status
    FROM hs_phases_all
    WHERE name = 'handoff.commit'
    -- One key, as the aggregate DuckDB rewrites it to (negated: descending, NULLs last).
    QUALIFY row_number() OVER (PARTITION BY handoff_key
                               ORDER BY (-attempt_no, -end_unix_nano)) = 1
), consumed AS (
    -- What each handoff passed on: named on its propose (handoff.consumed.*), or else the
    -- latest result its sender received earlier in the same trace.
    SELECT c.*, c."handoff.consumed.task_id" AS upstream_task, c."handoff.consumed.status" AS upstream_status
    FROM consumers AS c
    WHERE c."handoff.consumed.task_id" IS NOT NULL OR c."handoff.consumed.status" IS NOT NULL
    UNION ALL BY NAME
    SELECT c.*, r.task_id AS upstream_task, r.status AS upstream_status
    FROM consumers AS c
    JOIN results AS r
      ON r.trace_id = c.trace_id AND r.receiver = c."handoff.sender"
     AND r.end_unix_nano <= c.start_unix_nano AND r.handoff_key <> c.handoff_key
    WHERE c."handoff.consumed.task_id" IS NULL AND c."handoff.consumed.status" IS NULL
    QUALIFY row_number() OVER (PARTITION BY c.handoff_key ORDER BY r.end_unix_nano DESC) = 1
), proceeds AS (
    SELECT DISTINCT trace_id, "handoff.task_id" AS task_id
    FROM spans
    WHERE name = 'handoff.decision' AND "handoff.policy.action" = 'proceed'
)
SELECT
    p.trace_id,
    p.span_id,
    p."handoff.task_id" AS task_id,
    p."handoff.idempotency_key" AS idempotency_key,
    p."handoff.sender" AS sender,
    p."handoff.receiver" AS receiver,
    p.attempt_no AS attempt,
    NULL::DOUBLE AS value,
    format('{} passed the {} result of {} on to {} with no recorded decision',
           coalesce(p."handoff.sender", 'the sender'), p.upstream_status,
           coalesce(p.upstream_task, 'an upstream task'),
           coalesce(p."handoff.receiver", 'the receiver')) AS message
FROM consumed AS p
WHERE p.upstream_status IS NOT NULL
  AND p.upstream_status NOT IN ('complete', 'completed')
  AND NOT EXISTS (
      SELECT 1 FROM proceeds AS d
      WHERE d.trace_id = p.trace_id AND d.task_id = p.upstream_task)
