-- id: illegal-transition
-- severity: error
-- summary: An attempt changed state in a way the protocol forbids.
-- why: States move forward only (proposed, validated, then committed or void), and committed
--   and void are terminal and exclusive. A transition out of order, one after a terminal
--   state, or an attempt both committed and void means some party ignored the state machine,
--   typically a commit executed for a proposal that had already been voided. Attempts that
--   were committed on a late answer are reported by late-validation-used instead.
WITH moves AS NOT MATERIALIZED (
    -- Read twice; computed twice from the table instead of held whole.
    SELECT
        *,
        CASE mode
            WHEN 'two-step' THEN (from_state, to_state) IN (('start', 'proposed'),
                ('proposed', 'committed'), ('proposed', 'void'))
            WHEN 'fire-and-forget' THEN (from_state, to_state) IN (('start', 'committed'),
                ('start', 'void'))
            ELSE (from_state, to_state) IN (('start', 'proposed'), ('proposed', 'validated'),
                ('proposed', 'void'), ('validated', 'committed'), ('validated', 'void'))
        END AS allowed,
        -- Events stamped in the same nanosecond (a virtual clock) are ordered by the state
        -- they leave: start, proposed, validated, then the terminal states.
        CASE from_state WHEN 'start' THEN 0 WHEN 'proposed' THEN 1 WHEN 'validated' THEN 2
                        ELSE 3 END AS step
    FROM hs_transitions_all
), terminal AS (
    SELECT handoff_key, attempt_no,
           arg_min(to_state, hs_ns_then_rank(at_ns, step)) AS first_end,
           -- The first end's moment as two scalars: a comparison of (at_ns, step) pairs
           -- cost ClickHouse most of this rule's join over every move.
           arg_min(at_ns, hs_ns_then_rank(at_ns, step)) AS first_end_ns,
           arg_min(step, hs_ns_then_rank(at_ns, step)) AS first_end_step,
           arg_min(span_name, hs_ns_then_rank(at_ns, step)) AS first_end_span
    FROM moves
    WHERE to_state IN ('committed', 'void')
    GROUP BY handoff_key, attempt_no
), late AS (
    SELECT DISTINCT handoff_key, attempt_no
    FROM hs_phases_all
    WHERE name = 'handoff.validate' AND coalesce("handoff.late", false)
), offending AS (
    SELECT
        m.*,
        t.first_end,
        CASE
            WHEN NOT m.allowed THEN format('{} -> {} is not allowed', m.from_state, m.to_state)
            ELSE format('{} -> {} after the attempt was already {}', m.from_state,
                        m.to_state, t.first_end)
        END || CASE
            -- The receiver's sweep voiding an expired accept (`validated -> void` on
            -- `handoff.expire`) is legal; a commit that still ran for that attempt is not.
            WHEN NOT m.allowed THEN ''
            WHEN t.first_end_span = 'handoff.expire' AND m.to_state = 'committed'
                THEN ' (the receiver voided the expired accept, and the task still ran)'
            WHEN m.span_name = 'handoff.expire'
                THEN ' (the receiver voided as expired an accept that had been committed)'
            ELSE ''
        END AS problem
    FROM moves AS m
    LEFT JOIN terminal AS t USING (handoff_key, attempt_no)
    WHERE NOT m.allowed
       OR (t.first_end IS NOT NULL AND m.to_state IS DISTINCT FROM t.first_end
           AND (m.at_ns > t.first_end_ns
                OR (m.at_ns = t.first_end_ns AND m.step >= t.first_end_step)))
)
SELECT
    o.trace_id,
    o.span_id,
    p."handoff.task_id" AS task_id,
    p."handoff.idempotency_key" AS idempotency_key,
    p."handoff.sender" AS sender,
    p."handoff.receiver" AS receiver,
    o.attempt_no AS attempt,
    NULL::DOUBLE AS value,
    format('{} (attempt {}): {}', coalesce(p."handoff.task_id", 'a handoff'), o.attempt_no,
           o.problem) AS message
FROM offending AS o
LEFT JOIN (SELECT handoff_key, "handoff.task_id", "handoff.idempotency_key", "handoff.sender",
                  "handoff.receiver"
           FROM hs_phases_all QUALIFY row_number() OVER (PARTITION BY handoff_key
           ORDER BY start_unix_nano) = 1) AS p USING (handoff_key)
WHERE NOT EXISTS (SELECT 1 FROM late AS l
                  WHERE l.handoff_key = o.handoff_key AND l.attempt_no = o.attempt_no)
-- Ties (the `handoff` span and a phase span recording one move) go to the phase span.
QUALIFY row_number() OVER (PARTITION BY o.handoff_key
                           ORDER BY o.attempt_no, o.at_ns, o.step, o.span_name = 'handoff', o.span_id) = 1
