"""``RecentTaskStore``: a2a-sdk's in-memory task store, bounded to the most recent tasks.

Every handshake message makes one A2A task, and a2a-sdk's ``InMemoryTaskStore`` keeps every
task for the life of the process: a receiver that runs for weeks would grow without end. The
tasks are only an envelope (each ends in the request that made it, and the handshake's state
lives in the receiver's idempotency store), so forgetting the oldest loses nothing a sender
needs: a commit sent again is answered from the idempotency store, never from a task.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Final

from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryTaskStore
from a2a.types.a2a_pb2 import Task

from collector.errors import ConfigurationError

__all__ = ["DEFAULT_MAX_TASKS", "RecentTaskStore"]

DEFAULT_MAX_TASKS: Final = 10_000
"""Tasks ``a2a_app`` keeps by default (``GetTask`` finds these; older ones are forgotten)."""


class RecentTaskStore(InMemoryTaskStore):
    """An ``InMemoryTaskStore`` that keeps only the ``max_tasks`` most recently created tasks."""

    def __init__(self, max_tasks: int = DEFAULT_MAX_TASKS) -> None:
        if max_tasks < 1:
            raise ConfigurationError(f"max_tasks must be >= 1, got {max_tasks}")
        super().__init__()
        self.max_tasks = max_tasks
        self._order: OrderedDict[str, ServerCallContext] = OrderedDict()
        self._lock = threading.Lock()

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Save ``task``; forget the oldest task once more than ``max_tasks`` are kept."""
        await super().save(task, context)
        evicted: list[tuple[str, ServerCallContext]] = []
        with self._lock:
            if task.id not in self._order:
                self._order[task.id] = context
                while len(self._order) > self.max_tasks:
                    evicted.append(self._order.popitem(last=False))
        for task_id, owner in evicted:
            await super().delete(task_id, owner)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Delete ``task_id`` (and stop counting it)."""
        with self._lock:
            self._order.pop(task_id, None)
        await super().delete(task_id, context)

    def __len__(self) -> int:
        return len(self._order)
