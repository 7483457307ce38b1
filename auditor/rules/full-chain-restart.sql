-- id: full-chain-restart
-- severity: warning
-- summary: A whole workflow was run again instead of retrying the handoff that failed.
-- why: Retries belong to handoffs. Restarting the chain from the first agent repeats (and
--   pays for) every handoff that had already succeeded, and compounds the chance that one
--   of them fails this time.
SELECT
    trace_id,
    span_id,
    NULL::VARCHAR AS task_id,
    NULL::VARCHAR AS idempotency_key,
    agent AS sender,
    NULL::VARCHAR AS receiver,
    "handoff.workflow.attempt" AS attempt,
    "handoff.workflow.attempt"::DOUBLE AS value,
    format('workflow {} ({}) was run again from the start: run {}',
           coalesce("handoff.workflow.id", 'unknown'),
           coalesce("gen_ai.workflow.name", name), "handoff.workflow.attempt") AS message
FROM spans
WHERE "handoff.workflow.attempt" > 1
  AND ("gen_ai.operation.name" = 'invoke_workflow' OR name LIKE 'invoke_workflow%')
