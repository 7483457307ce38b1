-- Spend per agent on attempts that were voided (the auditor's agent_spend has the totals).
-- Built on the auditor's hs_phases macro; an attempt is void when any of its phase spans
-- ended in the void state.
-- Parameters: $void (state).
WITH phases AS (
    SELECT handoff_key, attempt_no, agent, "handoff.state" AS state,
           coalesce(cost_usd, 0) AS cost_usd,
           coalesce(input_tokens, 0) + coalesce(output_tokens, 0) AS tokens
    FROM hs_phases(NULL, NULL, [])
),
voided AS (
    SELECT handoff_key, attempt_no FROM phases GROUP BY ALL HAVING bool_or(state = $void)
)
SELECT p.agent, sum(p.cost_usd) AS voided_cost_usd, sum(p.tokens) AS voided_tokens
FROM phases p
JOIN voided v USING (handoff_key, attempt_no)
GROUP BY p.agent
ORDER BY p.agent
