"""One scheduler of a plan, free of Ray: a pending queue, a scoring program, State, a view of nodes.

Every role of every plan is this class, hosted where the plan puts it (the
submitting process, the selector actor, a placement actor on a node; see
:mod:`ray_adaptive.runtime.topology`):

* the **program** is what it scores with: the whole policy (centralized,
  decentralized), the task part of a separable Score (the hybrid's
  selector, whose only "node" is the pool of all slots), or the node part
  (the hybrid's placement schedulers, which serve forwarded tasks in order);
* the **nodes** are :class:`NodeState` views: a node has room while the
  tasks this scheduler sent there (``own``) plus what the others had there
  at the last heartbeat (``others``) are under ``executors + queue``, and
  ``get_load(node)`` reads that same sum;
* **power-of-d** scores ``d`` random nodes with room per decision instead
  of all of them;
* **State** is this scheduler's copy; with ``merge`` (replicated State) its
  hooks' changes since the last push are what :class:`DeltaLog` tells.

Decisions use the reference interpreter and tie rules (earlier arrival,
then task id, then node order), so a scheduler that sees everything decides
exactly as the ideal scheduler of the simulator -- and with its scoring: a
Score the compiler split into ``T(task) op N(node)`` (``split``) is scored
part by part, each value remembered while what it reads is unchanged
(:class:`~ray_adaptive.sim.scoring.SplitScoring`, bit-for-bit the matrix's),
so a least-loaded decision is a few dictionary look-ups. As there, a task still
pending at its ``deadline`` is dropped, with no hook run: :meth:`Scheduler.decide`
returns it with ``node`` None, and never places it (placed, it would hold a
slot for nothing until its process saw it was late) -- whatever the queue:
no decision is made for a task past its deadline.
"""

from __future__ import annotations

import bisect
import math
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Sequence, Tuple

from ray_adaptive.dsl.interp import Interpreter
from ray_adaptive.dsl.ir import Policy, task_attributes_read
from ray_adaptive.sim.replicas import DeltaLog, copy_state
from ray_adaptive.sim.scoring import ScoreSplit, group_key, scoring_for

__all__ = ["NodeState", "TaskState", "Scheduler", "POOL"]

POOL = "pool"  # the node id of the hybrid selector's single candidate: every slot of the cluster


@dataclass
class NodeState:
    """A node as one scheduler sees it (the interpreter's NodeView)."""

    id: str
    index: int
    executors: int
    queue: int
    resources: dict
    fields: dict = field(default_factory=dict)
    own: int = 0  # tasks this scheduler sent here, not finished yet
    others: int = 0  # other schedulers' outstanding tasks here, as of the last heartbeat
    alive: bool = True

    @property
    def load(self) -> int:
        return self.own + self.others

    @property
    def available(self) -> dict:
        return self.resources

    @property
    def has_room(self) -> bool:
        return self.alive and self.own + self.others < self.executors + self.queue

    def as_dict(self) -> dict:
        return {"id": self.id, "index": self.index, "executors": self.executors, "queue": self.queue,
                "resources": dict(self.resources), "fields": dict(self.fields)}

    @classmethod
    def from_dict(cls, d: Mapping) -> "NodeState":
        return cls(d["id"], d["index"], d["executors"], d["queue"], dict(d["resources"]), dict(d["fields"]))


@dataclass
class TaskState:
    """A task as schedulers see it (the interpreter's TaskView); plain data, sent between processes."""

    id: str
    arrival: float
    fields: dict
    origin: str = ""  # the submitting process's client id: where the decision goes back to
    node: Optional[str] = None  # the node decided (None from a decision: dropped at its deadline)
    hop: int = -1  # the hybrid: the placement scheduler it was forwarded to
    deadline: float = math.inf  # runtime time by which it must be placed, or it is dropped

    def export(self) -> dict:
        return {"id": self.id, "arrival": self.arrival, "fields": dict(self.fields), "origin": self.origin,
                "deadline": None if self.deadline == math.inf else self.deadline}


class _Pending:
    """A scheduler's pending queue, and the rows each decision scores.

    * FIFO (the hybrid's placement schedulers): tasks in the order received;
      a decision scores the first.
    * Grouped (``key``: what Score reads of a task, see
      :func:`~ray_adaptive.sim.scoring.group_key`): tasks of a group score
      alike against every node, so a decision scores each group's first task
      in (arrival, id) order -- its *head* -- only; heads in that order hold
      the whole queue's first minimum, the tie rule. A backlog of 10,000
      tasks from 3 tenants costs DRF-LB a few rows per decision, not 10,000.
    * Otherwise (Score reads ``task.id`` or ``task.arrival``: every task
      differs) one list in (arrival, id) order, all of it scored.
    """

    def __init__(self, fifo: bool, key: Optional[Callable[[TaskState], Any]]):
        self._fifo: Optional[Deque[TaskState]] = deque() if fifo else None
        self._key = key if key is not None else (lambda t: None)  # ungrouped: one group
        self._groups: Dict[Any, Tuple[List[tuple], List[TaskState]]] = {}  # key -> (sort keys, tasks)
        self._grouped = key is not None
        self.ids: set = set()  # of every pending task
        self.timed = False  # some task came with a finite deadline

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, task: TaskState) -> None:
        self.ids.add(task.id)
        self.timed = self.timed or task.deadline < math.inf
        if self._fifo is not None:
            self._fifo.append(task)
            return
        keys, tasks = self._groups.setdefault(self._key(task), ([], []))
        order = (task.arrival, task.id)
        i = bisect.bisect_right(keys, order)
        keys.insert(i, order)
        tasks.insert(i, task)

    def rows(self) -> List[TaskState]:
        """The tasks a decision scores, in tie-rule order."""
        if self._fifo is not None:
            return [self._fifo[0]] if self._fifo else []
        if not self._grouped:
            return list(self._groups[None][1]) if self._groups else []
        return sorted((tasks[0] for _, tasks in self._groups.values()), key=_arrival_order)

    def take(self, task: TaskState, row: int) -> None:
        """Remove ``task``, row ``row`` of the last :meth:`rows`."""
        self.ids.discard(task.id)
        if self._fifo is not None:
            self._fifo.popleft()
            return
        k = self._key(task)
        keys, tasks = self._groups[k]
        i = 0 if self._grouped else row
        del keys[i], tasks[i]
        if not tasks:
            del self._groups[k]

    def drop_late(self, now: float) -> List[TaskState]:
        """Remove the tasks past their deadline at the head of each group (of the FIFO) and return
        them. Heads only, so it costs a few checks per decision: a later task past its deadline
        goes once it is a head, and grouped and FIFO queues score heads only. (An ungrouped queue
        scores every task: :meth:`Scheduler.decide` drops one past its deadline that wins.)"""
        late: List[TaskState] = []
        if self._fifo is not None:
            while self._fifo and self._fifo[0].deadline < now:
                late.append(self._fifo.popleft())
        else:
            for k in [k for k, (_, tasks) in self._groups.items() if tasks[0].deadline < now]:
                keys, tasks = self._groups[k]
                while tasks and tasks[0].deadline < now:
                    late.append(tasks[0])
                    del keys[0], tasks[0]
                if not tasks:
                    del self._groups[k]
        self.ids.difference_update(t.id for t in late)
        return late

    def remove_where(self, which: Callable[[TaskState], bool]) -> List[TaskState]:
        out: List[TaskState] = []
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

    def tasks(self) -> List[TaskState]:
        """Every pending task, in the order decisions consider them."""
        if self._fifo is not None:
            return list(self._fifo)
        return sorted((t for _, ts in self._groups.values() for t in ts), key=_arrival_order)


def _arrival_order(t: TaskState) -> tuple:
    return t.arrival, t.id


class Scheduler:
    """Pending queue + program + State + node view (see the module doc)."""

    def __init__(self, program: Policy, nodes: Sequence[NodeState], *, hooks: bool = True, fifo: bool = False,
                 sample_d: int = 0, merge: Optional[Mapping[str, str]] = None, seed: int = 0, num_nodes: int = 0,
                 split: Optional[ScoreSplit] = None):
        self.interp = Interpreter(program, num_nodes=num_nodes or len(nodes))
        self.nodes = list(nodes)
        self.by_id = {n.id: n for n in self.nodes}
        self.hooks = hooks
        self.fifo = fifo
        self.sample_d = sample_d
        self.log = DeltaLog(merge, self.interp.state) if merge else None
        self._rng = random.Random(seed)
        reads = task_attributes_read(program.score)
        self._pending = _Pending(fifo, None if "arrival" in reads else group_key(program.score))
        # (a split part's values are remembered by task group; a Score reading task.id: by task)
        self._scoring = scoring_for(program, split, False, group_key(program.score) or (lambda t: t.id))
        self.running: Dict[str, TaskState] = {}  # decided, not finished
        self.decision_s: deque = deque(maxlen=100_000)  # seconds per decision, the recent ones

    # ---------------------------------------------------------------- hooks
    def _hook(self, name: str, task: TaskState, node: Optional[NodeState], now: float) -> None:
        if self.hooks:
            self.interp.run_hook(name, task, node, now)

    # ---------------------------------------------------------------- queue
    def add(self, task: TaskState, now: float) -> None:
        """A task joins the pending queue (ordered by arrival then id; or in order received, ``fifo``)."""
        self._pending.add(task)
        self._hook("OnArrival", task, None, now)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def _candidates(self) -> List[NodeState]:
        room = [n for n in self.nodes if n.has_room]
        if self.sample_d and len(room) > self.sample_d:
            picks = sorted(self._rng.sample(range(len(room)), self.sample_d))  # node order kept: the tie rule
            room = [room[i] for i in picks]
        return room

    def decide(self, now: float) -> List[TaskState]:
        """Bind (pending task, node with room) pairs while a feasible one exists; returns the tasks,
        each with ``node`` set (OnDispatch has run for each) -- and those dropped at their
        deadline, with ``node`` None."""
        chosen = []
        start = time.perf_counter()
        while self._pending:
            if self._pending.timed:
                late = self._pending.drop_late(now)
                chosen += late
                if late:
                    continue
            candidates = self._candidates()
            if not candidates:
                break
            rows = self._pending.rows()
            pick = self._scoring.scores(self.interp, rows, candidates, now).argmin()
            if pick is None:
                break
            i, j = pick
            task, node = rows[i], candidates[j]
            self._pending.take(task, i)
            if task.deadline < now:  # (an ungrouped queue scores every task: one past its deadline can win)
                chosen.append(task)  # dropped, node None: a decision is made by the deadline or not at all
                continue
            node.own += 1
            task.node = node.id
            self.running[task.id] = task
            self._hook("OnDispatch", task, node, now)
            chosen.append(task)
            end = time.perf_counter()
            self.decision_s.append(end - start)
            start = end
        return chosen

    def finish(self, task_id: str, now: float) -> Optional[TaskState]:
        """A decided task left its node: free its room and run OnFinish. None if unknown."""
        task = self.running.pop(task_id, None)
        if task is None:
            return None
        node = self.by_id[task.node]
        node.own -= 1
        self._hook("OnFinish", task, node, now)
        return task

    def adopt(self, tasks: Sequence[TaskState], dispatch_hooks: bool = False, now: float = 0.0) -> None:
        """Take over running tasks another scheduler decided (``node`` set). No hooks run -- their
        State comes along (a lease's handback) -- unless ``dispatch_hooks``: OnDispatch rebuilds
        their share of State here (a restarted selector, whose State started afresh)."""
        for t in tasks:
            self.running[t.id] = t
            node = self.by_id[t.node]
            node.own += 1
            if dispatch_hooks:
                self._hook("OnDispatch", t, node, now)

    def knows(self, task_id: str) -> bool:
        """Whether the task is pending or running here."""
        return task_id in self.running or task_id in self._pending.ids

    def release_running(self) -> List[TaskState]:
        """Hand every running task over to another scheduler (the inverse of :meth:`adopt`)."""
        out = list(self.running.values())
        for t in out:
            self.by_id[t.node].own -= 1
        self.running.clear()
        return out

    def cancel_pending(self, which: Optional[Callable[[TaskState], bool]] = None) -> List[TaskState]:
        """Remove the pending tasks ``which`` selects (default: all) and return them; no hooks run."""
        return self._pending.remove_where(which or (lambda t: True))

    # ---------------------------------------------------------------- views
    def set_others(self, others: Mapping[str, int]) -> None:
        """Other schedulers' outstanding tasks per node id (a heartbeat's news)."""
        for n in self.nodes:
            n.others = int(others.get(n.id, 0))

    def outstanding(self) -> Dict[str, int]:
        return {n.id: n.own for n in self.nodes}

    def export(self) -> dict:
        """Queues and State, for a plan that replaces this one: nothing queued is lost."""
        return {"pending": [t.export() for t in self._pending.tasks()],
                "running": [{**t.export(), "node": t.node} for t in self.running.values()],
                "state": copy_state(self.interp.state)}
