"""The deadline clock of a submitting process: tasks the policy has not placed by their ``deadline_s``.

The cluster model's ``deadline="dispatch"`` rule: a task still undecided at
its deadline is dropped, never launched. The process hears it at once (its
caller gets :class:`~ray_adaptive.errors.PlacementDeadlineExceeded`); the
scheduler that holds the task -- wherever it runs -- drops it when it next
decides, running no hook, and the router then forgets it.
"""

from __future__ import annotations

import heapq
from typing import Callable, Dict, List, Tuple

from ray_adaptive.runtime.routed import RoutedTask

__all__ = ["DeadlineClock"]


class DeadlineClock:
    """A heap of (deadline, task id) of the tasks with a finite deadline (the router's lock held throughout)."""

    def __init__(self) -> None:
        self._heap: List[Tuple[float, str]] = []
        # tasks dropped at their deadline that their scheduler has not reached yet (still in its queue,
        # not pending for anyone)
        self.unreached = 0

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, deadline: float, task_id: str) -> None:
        heapq.heappush(self._heap, (deadline, task_id))

    def expire(self, now: float, tasks: Dict[str, RoutedTask], drop: Callable[[RoutedTask, str], None]) -> List[RoutedTask]:
        """Drop (``drop(task, why)``) the tasks of ``tasks`` still undecided at their deadline, before
        ``now``; return them. Their scheduler has not reached them yet (see ``unreached``)."""
        expired = self.due(now, tasks)
        for task in expired:
            drop(task, "was not placed by then")
            task.expired = True
        self.unreached += len(expired)
        return expired

    def due(self, now: float, tasks: Dict[str, RoutedTask]) -> List[RoutedTask]:
        """The tasks of ``tasks`` still undecided and unsettled whose deadline is before ``now``. The heap
        drops the entries of long-placed tasks once it holds more than twice the live tasks plus 1024."""
        heap, out = self._heap, []
        while heap and heap[0][0] < now:
            task = tasks.get(heapq.heappop(heap)[1])
            # (a preempted task waits again with no deadline: it is owed its result)
            if task is not None and task.node is None and task.error is None and task.state.deadline < now:
                out.append(task)
        if len(heap) > 2 * len(tasks) + 1024:
            self._heap = [e for e in heap if e[1] in tasks]
            heapq.heapify(self._heap)
        return out
