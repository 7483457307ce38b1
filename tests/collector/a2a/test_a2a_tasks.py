"""The A2A receiver's task store is bounded: old tasks are forgotten, never the handshake."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import Task

from collector import Receiver, Sender, accept, schema
from collector.a2a import A2AChannel, a2a_app
from collector.a2a.tasks import RecentTaskStore
from collector.errors import ConfigurationError
from tests.support.a2a import served


def test_only_the_most_recent_tasks_are_kept():
    store = RecentTaskStore(max_tasks=3)
    context = ServerCallContext()

    async def main() -> list[Any]:
        for i in range(5):
            await store.save(Task(id=f"t{i}", context_id="c"), context)
        await store.save(Task(id="t4", context_id="c"), context)  # an update, not a new task
        return [await store.get(f"t{i}", context) for i in range(5)]

    found = asyncio.run(main())
    assert [t is not None for t in found] == [False, False, True, True, True]
    assert len(store) == 3


def test_max_tasks_must_be_positive():
    with pytest.raises(ConfigurationError, match="max_tasks"):
        RecentTaskStore(max_tasks=0)


def test_a_resent_commit_is_replayed_after_its_tasks_were_forgotten():
    runs: list[Any] = []
    receiver = Receiver(
        "writer",
        validator=lambda w: accept(eta_ms=10),
        executor=lambda w: runs.append(w.task_id) or {"n": len(runs)},
    )
    store = RecentTaskStore(max_tasks=2)
    with served(lambda url: a2a_app(receiver, url=url, task_store=store)) as url:
        with A2AChannel(url) as channel:
            sender = Sender("researcher")

            def hand(key: str) -> Any:
                return sender.handoff(
                    channel, task_id=key, payload={"k": key}, output_schema="d@1",
                    idempotency_key=key,
                )  # fmt: skip

            first = hand("k0")
            for i in range(1, 6):
                hand(f"k{i}")
            again = hand("k0")
    assert len(store) == 2
    assert again.result.outcome == schema.OUTCOME_REPLAYED
    assert again.result.result == first.result.result
    assert runs.count("k0") == 1
