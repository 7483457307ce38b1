-- id: unvalidated-handoff
-- severity: error
-- summary: An agent framework handed work to another agent with no handshake.
-- why: A delegation the trace shows (a framework's handoff or transfer tool, an agent called
--   as a tool, one agent's run nested in or following another's; docs/trace-schema.md lists
--   the evidence) passes control without a proposal the receiver validated, without an
--   idempotency key and without a commit record: a receiver that cannot do the task fails
--   downstream, and a retried handoff runs twice.
-- params: exempt_edges, exempt_receivers
SELECT
    trace_id,
    span_id,
    NULL::VARCHAR AS task_id,
    NULL::VARCHAR AS idempotency_key,
    sender,
    receiver,
    1 AS attempt,
    NULL::DOUBLE AS value,
    -- One literal pattern: ClickHouse's format() takes no concatenated one.
    format('{} handed work to {} ({}) with no handshake: no validation, no idempotency key, no commit record',
           coalesce(sender, 'an unnamed agent'), receiver, convention) AS message
FROM hs_framework_handoffs_all
WHERE NOT list_contains($exempt_receivers::VARCHAR[], receiver)
  AND NOT list_contains($exempt_edges::VARCHAR[], concat(sender, ' -> ', receiver))
