-- id: slow-validation
-- severity: warning
-- summary: A validation answer arrived after the validation timeout (default 2 s), or never came.
-- why: The sender stops waiting at the timeout and voids the proposal, so an answer that
--   arrives later can never be used: the handoff costs a retry, and the receiver did work
--   for nothing. It is reported even when the answer did arrive in the end, and when no
--   answer came at all (the slowest receiver of all).
-- params: validation_timeout_ms
SELECT
    trace_id,
    span_id,
    "handoff.task_id" AS task_id,
    "handoff.idempotency_key" AS idempotency_key,
    "handoff.sender" AS sender,
    "handoff.receiver" AS receiver,
    attempt_no AS attempt,
    latency_ms AS value,
    CASE WHEN latency_ms IS NULL THEN
        format('{} never answered the validation of {} (attempt {}); the sender gave up at the timeout of {:.0f} ms',
               coalesce("handoff.receiver", 'the receiver'), coalesce("handoff.task_id", 'a task'),
               attempt_no, $validation_timeout_ms)
    ELSE
        format('{} answered the validation of {} (attempt {}) after {:.0f} ms; the timeout is {:.0f} ms',
               coalesce("handoff.receiver", 'the receiver'), coalesce("handoff.task_id", 'a task'),
               attempt_no, latency_ms, $validation_timeout_ms)
    END AS message
FROM hs_phases_all
WHERE name = 'handoff.validate'
  AND CASE
      -- Compared in whole microseconds, like the library: exactly the timeout is still on time.
      WHEN latency_ms IS NOT NULL THEN round(latency_ms * 1000) > round($validation_timeout_ms * 1000)
      -- No answer: the span stayed open past the timeout. A reply that failed at once (an
      -- unreachable receiver) is a timeout too, but not a slow one.
      ELSE "handoff.decision" = 'timeout'
           AND round(duration_ms * 1000) >= round($validation_timeout_ms * 1000)
  END
