"""With the real clock the answer races the timeout: threads for sync, tasks for asyncio.

No test asserts how long anything took; ordering is forced with events, and only logical
consequences of the timeout are checked (a late answer's latency is above the timeout).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from collector import InProcessChannel, SystemClock, accept, schema
from collector.testing import SpanCapture

S = schema


@pytest.fixture
def cap():
    c = SpanCapture(clock=SystemClock())
    yield c
    c.shutdown()


def wait_for(predicate, seconds=10.0):
    give_up = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < give_up, "timed out waiting for the late answer"
        time.sleep(0.005)


def open_(sender, recv, **kw):
    return sender.open(
        InProcessChannel(recv),
        task_id=kw.pop("task_id", "t1"),
        payload=kw.pop("payload", {}),
        output_schema="doc@1",
        idempotency_key=kw.pop("idempotency_key", "k1"),
        **kw,
    )


def test_timeout_fires_while_the_receiver_is_still_thinking(cap):
    release = threading.Event()
    runs = []

    def validator(work):
        release.wait(10)
        return accept(eta_ms=10)

    recv = cap.receiver("writer", validator=validator, executor=lambda w: runs.append(1))
    h = open_(cap.sender("planner", validation_timeout_s=0.2), recv)
    assert h.propose() is None  # returned while the validator was blocked
    assert h.state == "void" and not release.is_set()
    # The timeout is written when it fires, before any answer came.
    v = cap.one(S.SPAN_VALIDATE)
    assert v[S.DECISION] == "timeout" and v[S.STATE] == "void" and S.LATE not in v
    span = cap.spans(S.SPAN_VALIDATE)[0]
    assert (span.end_time - span.start_time) / 1e6 >= 200
    release.set()
    # The late answer adds to the record, under the validate span, with its true latency.
    wait_for(lambda: cap.spans(S.SPAN_LATE_ANSWER))
    late = cap.spans(S.SPAN_LATE_ANSWER)[0]
    assert late.parent.span_id == span.context.span_id
    assert late.attributes[S.LATE] is True and late.attributes[S.LATE_DECISION] == "accept"
    assert late.attributes[S.VALIDATION_LATENCY_MS] > 200
    # the late accept never becomes a commit, even from a buggy sender
    assert h.commit(unchecked=True).outcome == "refused" and runs == []


def test_an_answer_inside_the_timeout_validates(cap):
    recv = cap.receiver("writer", validator=lambda w: accept(eta_ms=5), executor=lambda w: "ok")
    outcome = cap.sender("planner", validation_timeout_s=5).handoff(
        InProcessChannel(recv), task_id="t", payload={}, output_schema="d", idempotency_key="k"
    )
    assert outcome.committed
    v = cap.one(S.SPAN_VALIDATE)
    assert v[S.LATE] is False and 0 <= v[S.VALIDATION_LATENCY_MS] < 5000


def test_a_peer_that_never_answers_leaves_a_closed_void_span_at_once(cap):
    never = threading.Event()
    recv = cap.receiver("writer", validator=lambda w: never.wait(3) and None, executor=print)
    sender = cap.sender("planner", validation_timeout_s=0.05)
    h = open_(sender, recv)
    assert h.propose() is None
    v = cap.one(S.SPAN_VALIDATE)  # no waiting: ended when the clock fired
    assert v[S.DECISION] == "timeout" and S.VALIDATION_LATENCY_MS not in v
    never.set()


def test_an_answer_after_the_late_window_is_not_recorded(cap):
    release = threading.Event()
    recv = cap.receiver(
        "writer", validator=lambda w: release.wait(5) and accept(eta_ms=1), executor=print
    )
    sender = cap.sender("planner", validation_timeout_s=0.05, late_answer_window_s=0.06)
    h = open_(sender, recv)
    assert h.propose() is None
    time.sleep(0.1)  # ordering only: the window has passed before the answer is released
    release.set()
    wait_for(lambda: cap.spans("handoff.answer"))
    assert cap.spans(S.SPAN_LATE_ANSWER) == []


def test_every_raced_handoff_ends_committed_or_void_never_both(cap):
    rng = random.Random(7)
    delays = {f"t{i}": rng.uniform(0.0, 0.12) for i in range(24)}
    runs = []

    def validator(work):
        time.sleep(delays[work.task_id])
        return accept(eta_ms=10)

    def execute(work):
        runs.append(work.task_id)
        return work.task_id

    recv = cap.receiver("writer", validator=validator, executor=execute)
    sender = cap.sender("planner", validation_timeout_s=0.06, max_attempts=1)
    outcomes = {}

    def one(task):
        outcomes[task] = sender.handoff(
            InProcessChannel(recv),
            task_id=task,
            payload={},
            output_schema="d",
            idempotency_key=task,
        )

    threads = [threading.Thread(target=one, args=(t,)) for t in delays]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {o.state for o in outcomes.values()} <= {"committed", "void"}
    committed = sorted(t for t, o in outcomes.items() if o.state == "committed")
    assert sorted(runs) == committed  # executed exactly the committed ones, once each
    for task in outcomes:
        moves = [
            e.attributes[S.TRANSITION_TO]
            for s in cap.spans()
            if s.attributes.get(S.TASK_ID) == task
            for e in s.events
        ]
        assert not ("committed" in moves and "void" in moves), task


def test_asyncio_answer_races_the_timeout(cap):
    runs = []

    async def main():
        release = asyncio.Event()

        async def validator(work):
            await release.wait()
            return accept(eta_ms=10)

        recv = cap.receiver("writer", validator=validator, executor=lambda w: runs.append(1))
        h = open_(cap.sender("planner", validation_timeout_s=0.1), recv)
        answer = await h.apropose()
        state = h.state
        release.set()
        for _ in range(200):
            if cap.spans(S.SPAN_LATE_ANSWER):
                break
            await asyncio.sleep(0.01)
        return answer, state

    answer, state = asyncio.run(main())
    assert answer is None and state == "void" and runs == []
    assert cap.one(S.SPAN_VALIDATE)[S.DECISION] == "timeout"
    late = cap.one(S.SPAN_LATE_ANSWER)
    assert late[S.LATE] is True and late[S.VALIDATION_LATENCY_MS] > 100


def test_many_asyncio_handoffs_each_end_in_one_terminal_state(cap):
    rng = random.Random(11)
    delays = {f"t{i}": rng.uniform(0.0, 0.1) for i in range(40)}
    runs = []

    async def validator(work):
        await asyncio.sleep(delays[work.task_id])
        return accept(eta_ms=10)

    async def execute(work):
        runs.append(work.task_id)
        return work.task_id

    recv = cap.receiver("writer", validator=validator, executor=execute)
    sender = cap.sender("planner", validation_timeout_s=0.05, max_attempts=1)

    async def main():
        return await asyncio.gather(
            *(
                sender.ahandoff(
                    InProcessChannel(recv),
                    task_id=t,
                    payload={},
                    output_schema="d",
                    idempotency_key=t,
                )
                for t in delays
            )
        )

    outcomes = asyncio.run(main())
    assert {o.state for o in outcomes} <= {"committed", "void"}
    assert sorted(runs) == sorted(o.task_id for o in outcomes if o.committed)
