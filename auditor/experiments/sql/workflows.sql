-- One row per workflow: did it succeed, how long it took, where its time and money went.
-- Built on the auditor's helper macros (auditor.prepare): runs are hs_workflow_runs, phase
-- spans hs_phases, and an attempt's usable result is hs_attempts.ok. An attempt is void when
-- any of its phase spans ended in the void state.
-- Parameters: $success (workflow outcome), $validate, $commit (span names), $void (state),
-- $ran (commit outcomes in which the task actually ran).
WITH runs AS (
    SELECT r.trace_id, r.workflow_id, r.run, r.outcome = $success AS ok,
           s.start_unix_nano, s.end_unix_nano
    FROM hs_workflow_runs(NULL, NULL, []) r
    JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id
),
phases AS (
    SELECT trace_id, handoff_key, attempt_no, name, "handoff.state" AS state,
           "handoff.commit.outcome" AS outcome, coalesce(duration_ms, 0) AS duration_ms,
           coalesce(cost_usd, 0) AS cost_usd,
           coalesce(input_tokens, 0) + coalesce(output_tokens, 0) AS tokens
    FROM hs_phases(NULL, NULL, [])
),
attempts AS (
    SELECT p.handoff_key, p.attempt_no, bool_or(p.state = $void) AS voided, any_value(a.ok) AS ok
    FROM phases p
    JOIN hs_attempts(NULL, NULL, []) a USING (handoff_key, attempt_no)
    GROUP BY p.handoff_key, p.attempt_no
),
judged AS (
    SELECT p.*, r.workflow_id, r.ok AS run_ok, a.voided,
           p.name = $commit AND list_contains($ran, p.outcome) AS executed,
           p.name = $commit AND list_contains($ran, p.outcome) AND r.ok AND a.ok AS useful
    FROM phases p
    JOIN runs r USING (trace_id)
    JOIN attempts a USING (handoff_key, attempt_no)
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
           count(DISTINCT (handoff_key, attempt_no)) - count(DISTINCT handoff_key) AS retries,
           count(*) FILTER (WHERE executed) AS executions,
           count(*) FILTER (WHERE executed AND NOT useful) AS wasted_executions
    FROM judged
    GROUP BY workflow_id
),
per_workflow_runs AS (
    SELECT workflow_id,
           count(*) AS runs,
           arg_max(ok, run) AS ok,
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
