-- id: missing-handoff-metadata
-- severity: warning
-- summary: A proposal lacks its sender, receiver, payload version or output schema.
-- why: These four say who handed what to whom in which format. Without them the receiver
--   cannot check the schema, version changes break silently, and the audit cannot place
--   the handoff on an edge of the chain.
WITH checked AS (
    SELECT
        *,
        list_filter([
            CASE WHEN coalesce("handoff.sender", '') = '' THEN 'sender' END,
            CASE WHEN coalesce("handoff.receiver", '') = '' THEN 'receiver' END,
            CASE WHEN coalesce("handoff.payload_version", '') = '' THEN 'payload version' END,
            CASE WHEN coalesce("handoff.schema", '') = '' THEN 'output schema' END
        ], lambda x: x IS NOT NULL) AS missing
    FROM hs_phases_all
    WHERE name = 'handoff.propose'
)
SELECT
    trace_id,
    span_id,
    "handoff.task_id" AS task_id,
    "handoff.idempotency_key" AS idempotency_key,
    "handoff.sender" AS sender,
    "handoff.receiver" AS receiver,
    attempt_no AS attempt,
    len(missing)::DOUBLE AS value,
    format('the proposal of {} (attempt {}) has no {}', coalesce("handoff.task_id", 'a task'),
           attempt_no, array_to_string(missing, ', ')) AS message
FROM checked
WHERE len(missing) > 0
QUALIFY row_number() OVER (PARTITION BY handoff_key ORDER BY attempt_no, start_unix_nano) = 1
