-- id: validation-p95-over-budget
-- severity: warning
-- summary: A receiver's 95th-percentile validation latency is over the budget (default 500 ms).
-- why: Validation sits on the critical path of every handoff. Even when each answer arrives
--   within the 2 s clock, a receiver whose p95 is over budget slows every chain it is in and
--   is one bad day away from timeouts.
-- params: p95_budget_ms
-- scope: set
WITH latency AS (
    SELECT
        "handoff.receiver" AS receiver,
        count(*) AS answers,
        quantile_cont(latency_ms, 0.95) AS p95
    FROM hs_phases_all
    WHERE name = 'handoff.validate' AND latency_ms IS NOT NULL
    GROUP BY "handoff.receiver"
)
SELECT
    NULL::VARCHAR AS trace_id,
    NULL::VARCHAR AS span_id,
    NULL::VARCHAR AS task_id,
    NULL::VARCHAR AS idempotency_key,
    NULL::VARCHAR AS sender,
    receiver,
    NULL::INTEGER AS attempt,
    p95 AS value,
    format('{} validates with a p95 of {:.0f} ms over {} answers; the budget is {:.0f} ms',
           coalesce(receiver, 'an unnamed receiver'), p95, answers, $p95_budget_ms) AS message
FROM latency
WHERE p95 > $p95_budget_ms
