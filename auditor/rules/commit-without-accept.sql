-- id: commit-without-accept
-- severity: error
-- summary: A commit was sent for an attempt the receiver had not accepted in time.
-- why: Commit is only allowed after an accept; committing a rejected or unanswered proposal
--   asks the receiver to run work it said it cannot do (a conforming receiver refuses it).
--   A commit on a late accept is reported by late-validation-used instead.
WITH validations AS (
    SELECT handoff_key, attempt_no, "handoff.decision" AS decision
    FROM hs_phases_all
    WHERE name = 'handoff.validate'
      AND coalesce("handoff.decision", '') <> 'accept'
      AND NOT (coalesce("handoff.late", false)
               AND coalesce("handoff.late.decision", 'accept') = 'accept')
)
SELECT
    c.trace_id,
    c.span_id,
    c."handoff.task_id" AS task_id,
    c."handoff.idempotency_key" AS idempotency_key,
    c."handoff.sender" AS sender,
    c."handoff.receiver" AS receiver,
    c.attempt_no AS attempt,
    NULL::DOUBLE AS value,
    format('{} committed {} (attempt {}) although the validation answer was {} (commit {})',
           coalesce(c."handoff.sender", 'the sender'), coalesce(c."handoff.task_id", 'a task'),
           c.attempt_no, coalesce(v.decision, 'missing'),
           coalesce(c."handoff.commit.outcome", 'outcome unknown')) AS message
FROM hs_phases_all AS c
JOIN validations AS v USING (handoff_key, attempt_no)
WHERE c.name = 'handoff.commit'
QUALIFY row_number() OVER (PARTITION BY c.handoff_key ORDER BY c.attempt_no, c.start_unix_nano) = 1
