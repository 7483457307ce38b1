-- One row per workflow: did it succeed, how long it took, and where its time and money went.
-- Parameters: $invoke_workflow (gen_ai.operation.name of workflow roots), $success (the
-- success outcome), $handoff, $propose, $validate, $commit (span names), $void (state),
-- $ran (commit outcomes that executed the task), $usable (result statuses a successor can use).
WITH runs AS (
    SELECT trace_id,
           "handoff.workflow.id" AS workflow_id,
           coalesce("handoff.workflow.attempt", 1) AS run,
           "handoff.workflow.outcome" = $success AS ok,
           start_unix_nano,
           end_unix_nano
    FROM spans
    WHERE "gen_ai.operation.name" = $invoke_workflow
),
phases AS (
    SELECT trace_id,
           parent_span_id AS handoff_span,
           name,
           "handoff.attempt" AS attempt,
           "handoff.state" AS state,
           "handoff.commit.outcome" AS outcome,
           "handoff.result.status" AS status,
           coalesce(duration_ms, 0) AS duration_ms,
           coalesce(cost_usd, 0) AS cost_usd,
           coalesce(input_tokens, 0) + coalesce(output_tokens, 0) AS tokens
    FROM spans
    WHERE name IN ($propose, $validate, $commit)
),
attempts AS (
    -- An attempt is void when any of its phase spans ended in the void state.
    SELECT handoff_span, attempt, bool_or(state = $void) AS voided
    FROM phases
    GROUP BY handoff_span, attempt
),
judged AS (
    SELECT p.*,
           r.workflow_id,
           r.ok AS run_ok,
           a.voided,
           p.name = $commit AND list_contains($ran, p.outcome) AS executed,
           p.name = $commit AND list_contains($ran, p.outcome) AND r.ok AND NOT a.voided
               AND list_contains($usable, p.status) AS useful
    FROM phases p
    JOIN runs r USING (trace_id)
    JOIN attempts a ON a.handoff_span = p.handoff_span AND a.attempt IS NOT DISTINCT FROM p.attempt
),
per_workflow_phases AS (
    SELECT workflow_id,
           sum(duration_ms) FILTER (WHERE name = $validate) AS validation_ms,
           sum(duration_ms) FILTER (WHERE executed) AS execution_ms,
           sum(duration_ms) FILTER (WHERE executed AND NOT useful) AS wasted_execution_ms,
           sum(duration_ms) FILTER (WHERE run_ok AND voided) AS voided_ms,
           sum(cost_usd) AS cost_usd,
           sum(cost_usd) FILTER (WHERE voided) AS voided_cost_usd,
           sum(cost_usd) FILTER (WHERE NOT run_ok OR voided) AS wasted_cost_usd,
           sum(tokens) AS tokens,
           count(*) FILTER (WHERE name = $propose AND attempt > 1) AS retries,
           count(*) FILTER (WHERE executed) AS executions,
           count(*) FILTER (WHERE executed AND NOT useful) AS wasted_executions
    FROM judged
    GROUP BY workflow_id
),
per_workflow_runs AS (
    SELECT workflow_id,
           count(*) AS runs,
           bool_or(ok) AS ok,
           (max(end_unix_nano) - min(start_unix_nano)) / 1e6 AS e2e_ms,
           coalesce(sum(end_unix_nano - start_unix_nano) FILTER (WHERE NOT ok), 0) / 1e6
               AS failed_runs_ms
    FROM runs
    GROUP BY workflow_id
)
SELECT w.workflow_id,
       w.ok,
       w.runs,
       w.e2e_ms,
       coalesce(p.validation_ms, 0) AS validation_ms,
       coalesce(p.execution_ms, 0) AS execution_ms,
       coalesce(p.wasted_execution_ms, 0) AS wasted_execution_ms,
       -- Time that bought nothing: failed runs (restarts, or the whole workflow when it never
       -- succeeded) plus voided attempts inside the run that did succeed.
       w.failed_runs_ms + coalesce(p.voided_ms, 0) AS lost_ms,
       coalesce(p.cost_usd, 0) AS cost_usd,
       coalesce(p.voided_cost_usd, 0) AS voided_cost_usd,
       coalesce(p.wasted_cost_usd, 0) AS wasted_cost_usd,
       coalesce(p.tokens, 0) AS tokens,
       coalesce(p.retries, 0) AS retries,
       coalesce(p.executions, 0) AS executions,
       coalesce(p.wasted_executions, 0) AS wasted_executions
FROM per_workflow_runs w
LEFT JOIN per_workflow_phases p USING (workflow_id)
ORDER BY w.workflow_id
