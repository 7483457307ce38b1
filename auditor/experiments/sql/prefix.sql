-- End-to-end success of the first n agents of every workflow, for n = 1 .. $max_agents.
-- A handoff succeeded when it was committed with a result its successor can use; a run's
-- first n agents succeeded when none of its first n handoffs failed and all n took place.
-- A workflow's n-agent chain succeeded when any of its runs got past agent n; the runs it
-- needed are the runs up to that one (or all of them).
-- Parameters: $invoke_workflow, $handoff, $commit (span names), $committed (state),
-- $usable (result statuses), $max_agents.
WITH runs AS (
    SELECT trace_id,
           "handoff.workflow.id" AS workflow_id,
           coalesce("handoff.workflow.attempt", 1) AS run
    FROM spans
    WHERE "gen_ai.operation.name" = $invoke_workflow
),
handoffs AS (
    SELECT trace_id,
           span_id,
           "handoff.state" AS state,
           row_number() OVER (PARTITION BY trace_id ORDER BY start_unix_nano, span_id) AS position
    FROM spans
    WHERE name = $handoff
),
last_commit AS (
    SELECT parent_span_id AS span_id, arg_max("handoff.result.status", start_unix_nano) AS status
    FROM spans
    WHERE name = $commit
    GROUP BY parent_span_id
),
judged AS (
    SELECT h.trace_id, h.position,
           h.state = $committed AND coalesce(list_contains($usable, c.status), false) AS ok
    FROM handoffs h
    LEFT JOIN last_commit c USING (span_id)
),
per_run AS (
    SELECT r.workflow_id, r.run,
           coalesce(min(j.position) FILTER (WHERE NOT j.ok), count(j.position) + 1) AS first_failure
    FROM runs r
    LEFT JOIN judged j USING (trace_id)
    GROUP BY r.workflow_id, r.run
),
lengths AS (SELECT unnest(range(1, $max_agents + 1)) AS n),
per_length AS (
    SELECT l.n, p.workflow_id,
           bool_or(p.first_failure > l.n) AS ok,
           coalesce(min(p.run) FILTER (WHERE p.first_failure > l.n), max(p.run)) AS runs_needed
    FROM lengths l
    CROSS JOIN per_run p
    GROUP BY l.n, p.workflow_id
)
SELECT n,
       count(*) AS workflows,
       count(*) FILTER (WHERE ok) AS successes,
       sum(runs_needed - 1) AS restarts
FROM per_length
GROUP BY n
ORDER BY n
