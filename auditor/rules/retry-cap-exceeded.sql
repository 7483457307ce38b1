-- id: retry-cap-exceeded
-- severity: error
-- summary: A handoff was attempted more times than its retry cap allows.
-- why: The cap (3 attempts by default: 2 retries) bounds what one failing receiver can cost
--   and makes the sender escalate instead of hammering it. Going past it hides a failure
--   behind ever more attempts.
-- params: default_max_attempts
SELECT
    trace_id,
    span_id,
    "handoff.task_id" AS task_id,
    "handoff.idempotency_key" AS idempotency_key,
    "handoff.sender" AS sender,
    "handoff.receiver" AS receiver,
    attempt_no AS attempt,
    attempt_no::DOUBLE AS value,
    format('{} made attempt {} at {}; the cap is {} attempts',
           coalesce("handoff.sender", 'the sender'), attempt_no,
           coalesce("handoff.task_id", 'a task'),
           coalesce("handoff.max_attempts", $default_max_attempts)) AS message
FROM hs_phases_all
WHERE name IN ('handoff.propose', 'handoff.commit')
  AND attempt_no > coalesce("handoff.max_attempts", $default_max_attempts)
QUALIFY row_number() OVER (PARTITION BY handoff_key ORDER BY attempt_no, start_unix_nano) = 1
