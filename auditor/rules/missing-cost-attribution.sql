-- id: missing-cost-attribution
-- severity: warning
-- summary: A phase did model work without recording who spent what.
-- why: Spend per agent and per phase is only as good as the spans it is added up from. An
--   executed commit with no agent, model, tokens or cost, tokens with no cost (a model
--   missing from the price table), or a cost with no agent, leaves money unaccounted for.
WITH framework_paid AS (
    -- Executed commits whose work ran in an agent framework (collector.integrations): it
    -- leaves its tokens on the framework's model spans of the receiver, during the commit.
    -- Found for the executed commits alone, not asked of every phase span, and keyed by
    -- what the finding depends on: the trace, the receiver and the commit's time span.
    SELECT DISTINCT c.trace_id, c."handoff.receiver" AS receiver, c.start_unix_nano,
                    c.end_unix_nano
    FROM hs_phases_all AS c
    JOIN spans AS m
      ON m.trace_id = c.trace_id
     AND m.agent = c."handoff.receiver"
     AND m.start_unix_nano >= c.start_unix_nano
     AND m.end_unix_nano <= c.end_unix_nano
    WHERE c.name = 'handoff.commit' AND c."handoff.commit.outcome" = 'executed'
      AND NOT starts_with(m.name, 'handoff')
      AND (m.input_tokens IS NOT NULL OR m.output_tokens IS NOT NULL)
), checked AS (
    SELECT
        *,
        CASE
            WHEN name = 'handoff.commit' AND "handoff.commit.outcome" = 'executed'
                 AND NOT EXISTS (
                     SELECT 1 FROM framework_paid AS f
                     WHERE f.trace_id = hs_phases_all.trace_id
                       AND f.receiver = hs_phases_all."handoff.receiver"
                       AND f.start_unix_nano = hs_phases_all.start_unix_nano
                       AND f.end_unix_nano = hs_phases_all.end_unix_nano)
                 AND ("gen_ai.agent.name" IS NULL OR "gen_ai.request.model" IS NULL
                      OR input_tokens IS NULL OR output_tokens IS NULL OR cost_usd IS NULL)
                THEN 'an executed commit without ' || array_to_string(list_filter([
                    CASE WHEN "gen_ai.agent.name" IS NULL THEN 'agent' END,
                    CASE WHEN "gen_ai.request.model" IS NULL THEN 'model' END,
                    CASE WHEN input_tokens IS NULL OR output_tokens IS NULL THEN 'tokens' END,
                    CASE WHEN cost_usd IS NULL THEN 'cost' END], lambda x: x IS NOT NULL), ', ')
            WHEN (input_tokens IS NOT NULL OR output_tokens IS NOT NULL) AND cost_usd IS NULL
                THEN format('{} tokens without a cost (model {})',
                            coalesce(input_tokens, 0) + coalesce(output_tokens, 0),
                            coalesce("gen_ai.request.model", 'unknown'))
            WHEN cost_usd IS NOT NULL AND "gen_ai.agent.name" IS NULL
                THEN 'a cost without an agent name'
        END AS gap
    FROM hs_phases_all
)
SELECT
    trace_id,
    span_id,
    "handoff.task_id" AS task_id,
    "handoff.idempotency_key" AS idempotency_key,
    "handoff.sender" AS sender,
    "handoff.receiver" AS receiver,
    attempt_no AS attempt,
    NULL::DOUBLE AS value,
    format('{} of {} (attempt {}): {}', name, coalesce("handoff.task_id", 'a task'),
           attempt_no, gap) AS message
FROM checked
WHERE gap IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY handoff_key ORDER BY attempt_no, start_unix_nano) = 1
