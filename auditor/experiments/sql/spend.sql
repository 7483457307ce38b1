-- Spend per agent and phase, and how much of it went into attempts that were voided.
-- An attempt is void when any of its phase spans ended in the void state.
-- Parameters: $propose, $validate, $commit (span names), $void (state).
WITH phases AS (
    SELECT parent_span_id AS handoff_span, "handoff.attempt" AS attempt, name, agent,
           "handoff.state" AS state, coalesce(cost_usd, 0) AS cost_usd,
           coalesce(input_tokens, 0) + coalesce(output_tokens, 0) AS tokens
    FROM spans
    WHERE name IN ($propose, $validate, $commit)
),
attempts AS (
    SELECT handoff_span, attempt, bool_or(state = $void) AS voided
    FROM phases
    GROUP BY handoff_span, attempt
)
SELECT p.agent,
       sum(p.cost_usd) AS cost_usd,
       sum(p.cost_usd) FILTER (WHERE a.voided) AS voided_cost_usd,
       sum(p.tokens) AS tokens,
       sum(p.tokens) FILTER (WHERE a.voided) AS voided_tokens
FROM phases p
JOIN attempts a ON a.handoff_span = p.handoff_span AND a.attempt IS NOT DISTINCT FROM p.attempt
GROUP BY p.agent
ORDER BY p.agent
