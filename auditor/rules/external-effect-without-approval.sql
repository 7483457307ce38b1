-- id: external-effect-without-approval
-- severity: error
-- summary: An external effect was performed without a recorded approval.
-- why: Effects outside the system (an email sent, a payment made) cannot be retried or
--   undone. The envelope rules hold them for approval; performing one with no approver on
--   record is exactly what the hold exists to prevent.
SELECT
    trace_id,
    span_id,
    "handoff.task_id" AS task_id,
    "handoff.idempotency_key" AS idempotency_key,
    "handoff.sender" AS sender,
    "handoff.receiver" AS receiver,
    attempt_no AS attempt,
    NULL::DOUBLE AS value,
    format('{} performed {} for {} with no approval on record',
           coalesce("handoff.receiver", 'the receiver'),
           coalesce(array_to_string("handoff.external_effects", ', '), 'an external effect'),
           coalesce("handoff.task_id", 'a task')) AS message
FROM hs_phases_all
WHERE name = 'handoff.commit'
  AND coalesce("handoff.external_effect.performed", false)
  AND coalesce("handoff.approval", '') = ''
QUALIFY row_number() OVER (PARTITION BY handoff_key ORDER BY attempt_no, start_unix_nano) = 1
