-- id: fire-and-forget
-- severity: error
-- summary: Work was committed with no validation: the handoff skipped the handshake.
-- why: Without a validate step nobody checks that the receiver can do the task, by when, or
--   that it got a key; failures surface only downstream and chains fail multiplicatively
--   (five agents at 95% finish only 77% of workflows).
SELECT
    c.trace_id,
    c.span_id,
    c."handoff.task_id" AS task_id,
    c."handoff.idempotency_key" AS idempotency_key,
    c."handoff.sender" AS sender,
    c."handoff.receiver" AS receiver,
    c.attempt_no AS attempt,
    NULL::DOUBLE AS value,
    format('{} handed {} to {} without validation ({} mode)',
           coalesce(c."handoff.sender", 'the sender'), coalesce(c."handoff.task_id", 'a task'),
           coalesce(c."handoff.receiver", 'the receiver'),
           coalesce(c."handoff.mode", 'unknown')) AS message
FROM hs_phases_all AS c
WHERE c.name = 'handoff.commit'
  AND NOT EXISTS (
      SELECT 1 FROM hs_phases_all AS v
      WHERE v.name = 'handoff.validate'
        AND v.handoff_key = c.handoff_key AND v.attempt_no = c.attempt_no)
QUALIFY row_number() OVER (PARTITION BY c.handoff_key ORDER BY c.attempt_no, c.start_unix_nano) = 1
