"""A scheduler's pending queue: the one the simulator's schedulers and the runtime's share.

Tasks wait in (arrival, id) order -- the cluster model's tie rule -- and a
decision scores *rows* of the queue, not every task:

* **grouped** (``key``: what Score reads of a task, see
  :func:`~ray_adaptive.plan.scoring.row_key`): tasks of a group score alike
  against every node, so a decision scores each group's first task -- its
  *head* -- only; heads in (arrival, id) order hold the whole queue's first
  minimum. A backlog of 10,000 tasks from 3 tenants costs DRF-LB a few rows
  per decision, not 10,000.
* **ungrouped** (``key`` None: Score reads ``task.id``, or ``task.arrival``
  so that every task differs): one list in (arrival, id) order, all scored.
* **FIFO** (the hybrid's placement schedulers): tasks in the order received;
  a decision scores the first.

**Newest first under a backlog** (``newest_first``, grouped queues only; the
runtime's in-process deciders): a group whose oldest task has waited more than
that fraction of its deadline's span has its *newest* task as its row (adaptive
LIFO). A process offered more than its share of a saturated host serves an
oldest-first backlog at its deadline's edge: each task is placed just in time
and starts late on Ray's launch path, so the process delivers nearly nothing in
time (issue 37: under a tenth of what it placed, steady state). Newest first, what it
places has most of its deadline left, and what it cannot reach expires at the
group's head as before. Tasks of a group score alike, so which of them goes
first changes no decision of the policy; a group without deadlines stays
oldest first (waiting costs it nothing), as does a group whose newest task
has none.

Tasks are anything with ``id`` and ``arrival`` (and ``deadline`` when the
queue tracks deadlines: the runtime's, whose deadlines are checked at
decision time; the simulator drops late tasks with timeout events instead).

Example:
    >>> from types import SimpleNamespace as T
    >>> q = PendingQueue(key=lambda t: t.tenant)
    >>> for i, (tenant, arrival) in enumerate([("a", 2.0), ("b", 1.0), ("a", 0.5)]):
    ...     q.add(T(id=f"t{i}", arrival=arrival, tenant=tenant))
    >>> [t.id for t in q.rows()], q.count(q.rows()[0])
    (['t2', 't1'], 2)
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

__all__ = ["PendingQueue"]

_UNGROUPED = object()  # the one group of an ungrouped queue


def _order(t) -> tuple:
    return t.arrival, t.id


class PendingQueue:
    """Pending tasks, ordered by (arrival, id) within groups, or FIFO (see the module doc)."""

    def __init__(self, key: Optional[Callable[[Any], Any]] = None, fifo: bool = False, deadlines: bool = False,
                 newest_first: Optional[float] = None):
        if newest_first is not None and not 0.0 <= newest_first <= 1.0:
            raise ValueError(f"newest_first must be a fraction of a deadline's span in [0, 1], found {newest_first!r}")
        self._fifo: Optional[Deque] = deque() if fifo else None
        self._grouped = key is not None and not fifo
        self._key: Callable[[Any], Any] = key if key is not None and self._grouped else (lambda t: _UNGROUPED)
        self._groups: Dict[Any, Tuple[List[tuple], List[Any]]] = {}  # key -> (sort keys, tasks)
        self._deadlines = deadlines
        self.ids: set = set()  # of every pending task
        self.timed = False  # some task came with a finite deadline
        self.newest_first = newest_first if self._grouped else None
        self._now = -math.inf  # the clock of the last decision (see at()): a backlog is judged at it

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, task) -> None:
        self.ids.add(task.id)
        if self._deadlines and task.deadline < math.inf:
            self.timed = True
        if self._fifo is not None:
            self._fifo.append(task)
            return
        k = self._key(task)
        group = self._groups.get(k)
        if group is None:
            group = self._groups[k] = ([], [])
        keys, tasks = group
        order = (task.arrival, task.id)
        if not keys or keys[-1] <= order:  # arrivals come in order: the common case appends
            keys.append(order)
            tasks.append(task)
            return
        i = bisect.bisect_right(keys, order)
        keys.insert(i, order)
        tasks.insert(i, task)

    def remove(self, task) -> bool:
        """Take ``task`` out wherever it is; False if it is not here."""
        if task.id not in self.ids:
            return False
        if self._fifo is not None:
            self._fifo.remove(task)
        else:
            k = self._key(task)
            keys, tasks = self._groups[k]
            i = bisect.bisect_left(keys, (task.arrival, task.id))
            del keys[i], tasks[i]
            if not tasks:
                del self._groups[k]
        self.ids.discard(task.id)
        return True

    def rows(self, upto: float = math.inf) -> List:
        """The tasks a decision scores (that had arrived by ``upto``), in tie-rule order."""
        if self._fifo is not None:
            return [self._fifo[0]] if self._fifo and self._fifo[0].arrival <= upto else []
        if not self._grouped:
            entry = self._groups.get(_UNGROUPED)
            if entry is None:
                return []
            keys, tasks = entry
            return list(tasks) if upto == math.inf else tasks[:bisect.bisect_right(keys, (upto, "\U0010ffff"))]
        heads = [self._row(keys, tasks, upto) for keys, tasks in self._groups.values() if keys[0][0] <= upto]
        heads.sort(key=_order)
        return heads

    def at(self, now: float) -> None:
        """The time of the decision about to be made: which groups are backlogged is judged at it."""
        self._now = now

    def _backlogged(self, tasks: List) -> bool:
        """Whether a group (its tasks oldest first) serves its newest first: see the module doc."""
        head = tasks[0]
        # both ends timed: a group whose newest task has no deadline keeps its order (waiting costs that
        # task nothing, and served first it would take the room of the timed ones behind the head)
        if self.newest_first is None or len(tasks) < 2 or head.deadline == math.inf or tasks[-1].deadline == math.inf:
            return False
        return self._now - head.arrival > self.newest_first * (head.deadline - head.arrival)

    def _row(self, keys: List[tuple], tasks: List, upto: float = math.inf):
        if not self._backlogged(tasks):
            return tasks[0]
        return tasks[-1] if upto == math.inf else tasks[bisect.bisect_right(keys, (upto, "\U0010ffff")) - 1]

    def take(self, task, row: int) -> None:
        """Remove ``task``, row ``row`` of the last :meth:`rows`."""
        self.ids.discard(task.id)
        if self._fifo is not None:
            self._fifo.popleft()
            return
        k = self._key(task)
        keys, tasks = self._groups[k]
        i = row if not self._grouped else (0 if tasks[0] is task else bisect.bisect_left(keys, (task.arrival, task.id)))
        del keys[i], tasks[i]
        if not tasks:
            del self._groups[k]

    def count(self, row_task, upto: float = math.inf) -> int:
        """How many tasks (that had arrived by ``upto``) row ``row_task`` stands for: its group's."""
        if not self._grouped:
            return 1
        keys, _ = self._groups[self._key(row_task)]
        return len(keys) if upto == math.inf else bisect.bisect_right(keys, (upto, "\U0010ffff"))

    def position(self, task) -> int:
        """How many tasks of ``task``'s group are before it (0: it is its group's row)."""
        if not self._grouped:
            return 0
        keys, tasks = self._groups[self._key(task)]
        i = bisect.bisect_left(keys, (task.arrival, task.id))
        return len(keys) - 1 - i if self._backlogged(tasks) else i

    def row_of(self, task, rows: List) -> Optional[int]:
        """The index in ``rows`` of the row that stands for ``task`` (its group's head), or None."""
        if not self._grouped:
            return next((i for i, r in enumerate(rows) if r is task), None)
        k = self._key(task)
        return next((i for i, r in enumerate(rows) if self._key(r) == k), None)

    def drop_late(self, now: float, slack: Optional[Callable[[Any], float]] = None) -> List:
        """Remove the tasks past their deadline at the head of each group (of the FIFO) and return
        them. Heads only, so it costs a few checks per decision: a later task past its deadline
        goes once it is a head (an ungrouped queue scores every task: the scheduler drops one
        past its deadline that wins). ``slack(task)``: seconds before its deadline from which a
        task counts as past it (see ``Scheduler.slack``)."""
        late: List = []
        past = (lambda t: t.deadline < now) if slack is None else (lambda t: t.deadline - slack(t) < now)
        if self._fifo is not None:
            while self._fifo and past(self._fifo[0]):
                late.append(self._fifo.popleft())
        else:
            for k in [k for k, (_, tasks) in self._groups.items() if past(tasks[0])]:
                keys, tasks = self._groups[k]
                while tasks and past(tasks[0]):
                    late.append(tasks[0])
                    del keys[0], tasks[0]
                if not tasks:
                    del self._groups[k]
        self.ids.difference_update(t.id for t in late)
        return late

    def remove_where(self, which: Callable[[Any], bool]) -> List:
        """Remove the tasks ``which`` selects; return them."""
        out: List = []
        if self._fifo is not None:
            out = [t for t in self._fifo if which(t)]
            self._fifo = deque(t for t in self._fifo if not which(t))
        for k in list(self._groups):
            keys, tasks = self._groups[k]
            drop = [which(t) for t in tasks]
            out += [t for t, d in zip(tasks, drop) if d]
            kept = [(o, t) for o, t, d in zip(keys, tasks, drop) if not d]
            if kept:
                self._groups[k] = ([o for o, _ in kept], [t for _, t in kept])
            else:
                del self._groups[k]
        self.ids.difference_update(t.id for t in out)
        return out

    def tasks(self) -> List:
        """Every pending task, in the order decisions consider them."""
        if self._fifo is not None:
            return list(self._fifo)
        return sorted((t for _, ts in self._groups.values() for t in ts), key=_order)
