-- End-to-end success of the first n agents of every workflow, for n = 1 .. $max_agents.
-- Built on the auditor's helper macros (auditor.prepare): a handoff succeeded when one of
-- its attempts produced a usable result (hs_attempts.ok); a run's first n agents succeeded
-- when its first n handoffs all took place and succeeded. A workflow's n-agent chain
-- succeeded when any of its runs got past agent n; the runs it needed are the runs up to that
-- one (or all of them).
-- Parameters: $max_agents.
WITH runs AS (
    SELECT trace_id, workflow_id, run FROM hs_workflow_runs(NULL, NULL, [])
),
handoffs AS (
    SELECT trace_id, handoff_key,
           row_number() OVER (PARTITION BY trace_id ORDER BY start_unix_nano, handoff_key)
               AS position
    FROM hs_handoffs(NULL, NULL, [])
),
succeeded AS (
    SELECT handoff_key, bool_or(ok) AS ok FROM hs_attempts(NULL, NULL, []) GROUP BY handoff_key
),
judged AS (
    SELECT h.trace_id, h.position, coalesce(s.ok, false) AS ok
    FROM handoffs h
    LEFT JOIN succeeded s USING (handoff_key)
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
