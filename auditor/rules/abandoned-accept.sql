-- id: abandoned-accept
-- severity: warning
-- summary: An accepted proposal was never committed nor cancelled.
-- why: An accept reserves the receiver's capacity until the commit deadline. A sender that
--   walks away without committing or cancelling holds that capacity hostage and leaves the
--   task undone; the protocol voids such accepts only when the commit deadline passes.
WITH deadlines AS (
    SELECT handoff_key, max("handoff.deadline_unix_ms") AS deadline_ms
    FROM hs_phases_all WHERE name = 'handoff.propose'
    GROUP BY handoff_key
), cancels AS (
    SELECT handoff_key, attempt_no, min(at_ns) AS at_ns
    FROM hs_transitions_all
    WHERE from_state = 'validated' AND to_state = 'void' AND span_name <> 'handoff.expire'
    GROUP BY handoff_key, attempt_no
), sweeps AS (
    -- The receiver's sweep voiding the accept at its deadline (`handoff.expire`) is no
    -- cancel: the sender still walked away, and the finding says the receiver voided it.
    SELECT DISTINCT handoff_key, attempt_no
    FROM hs_phases_all WHERE name = 'handoff.expire'
)
SELECT
    v.trace_id,
    v.span_id,
    v."handoff.task_id" AS task_id,
    v."handoff.idempotency_key" AS idempotency_key,
    v."handoff.sender" AS sender,
    v."handoff.receiver" AS receiver,
    v.attempt_no AS attempt,
    NULL::DOUBLE AS value,
    format('{} accepted {} (attempt {}) but {} never committed or cancelled it{}',
           coalesce(v."handoff.receiver", 'the receiver'), coalesce(v."handoff.task_id", 'a task'),
           v.attempt_no, coalesce(v."handoff.sender", 'the sender'),
           CASE WHEN w.handoff_key IS NOT NULL
                THEN format(', so {} voided it at its commit deadline',
                            coalesce(v."handoff.receiver", 'the receiver'))
                ELSE '' END) AS message
FROM hs_phases_all AS v
LEFT JOIN deadlines AS d USING (handoff_key)
LEFT JOIN cancels AS x ON x.handoff_key = v.handoff_key AND x.attempt_no = v.attempt_no
LEFT JOIN sweeps AS w ON w.handoff_key = v.handoff_key AND w.attempt_no = v.attempt_no
WHERE v.name = 'handoff.validate'
  AND v."handoff.decision" = 'accept'
  AND NOT EXISTS (
      SELECT 1 FROM hs_phases_all AS c
      WHERE c.name = 'handoff.commit'
        AND c.handoff_key = v.handoff_key AND c.attempt_no = v.attempt_no)
  -- A void before the commit deadline is the sender cancelling; after it, a presumed abort.
  AND NOT (x.at_ns IS NOT NULL
           AND (coalesce(v."handoff.commit_deadline_unix_ms", d.deadline_ms) IS NULL
                OR x.at_ns // 1000000 <= coalesce(v."handoff.commit_deadline_unix_ms", d.deadline_ms)))
QUALIFY row_number() OVER (PARTITION BY v.handoff_key ORDER BY v.attempt_no, v.start_unix_nano) = 1
