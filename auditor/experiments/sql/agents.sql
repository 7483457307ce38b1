-- One row per receiving agent: how often its attempts and its handoffs succeeded.
-- An attempt succeeded when it was not voided and its commit delivered a usable result;
-- a handoff succeeded when it ended committed with a usable result (after any retries).
-- Parameters: $handoff, $validate, $commit (span names), $void, $committed (states),
-- $usable (result statuses).
WITH handoffs AS (
    SELECT span_id, "handoff.receiver" AS receiver, "handoff.state" AS state
    FROM spans
    WHERE name = $handoff
),
phases AS (
    SELECT parent_span_id AS handoff_span, name, "handoff.attempt" AS attempt,
           "handoff.state" AS state, "handoff.result.status" AS status, start_unix_nano
    FROM spans
    WHERE name IN ($validate, $commit)
),
attempts AS (
    SELECT handoff_span, attempt,
           bool_or(state = $void) AS voided,
           arg_max(status, start_unix_nano) FILTER (WHERE name = $commit) AS status
    FROM phases
    GROUP BY handoff_span, attempt
),
last_status AS (
    SELECT handoff_span, arg_max(status, attempt) AS status FROM attempts GROUP BY handoff_span
)
SELECT h.receiver AS agent,
       count(DISTINCT h.span_id) AS handoffs,
       count(DISTINCT h.span_id) FILTER (
           WHERE h.state = $committed AND list_contains($usable, l.status)) AS handoff_successes,
       count(a.attempt) AS attempts,
       count(a.attempt) FILTER (
           WHERE NOT a.voided AND list_contains($usable, a.status)) AS attempt_successes
FROM handoffs h
LEFT JOIN attempts a ON a.handoff_span = h.span_id
LEFT JOIN last_status l ON l.handoff_span = h.span_id
GROUP BY h.receiver
ORDER BY h.receiver
