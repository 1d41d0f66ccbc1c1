"""The cluster and scheduling model, shared by replay, simulator and runtime.

* A node has an id, ``resources``, ``executors`` (tasks it runs at once, FIFO)
  and a bounded ``queue``. It is a *candidate* for a task while
  queued + running < executors + queue (the room rule,
  :mod:`ray_adaptive.plan.room`) and the task's resources fit in what
  is not held by tasks already dispatched to it.
* ``load`` (what ``get_load(node)`` returns) = tasks queued + running on it.
* Tasks wait in the scheduler's pending queue until a candidate exists.
* A task holds its resources on its node from dispatch until it leaves.
* Overload control: a task that has not *started* by ``arrival + timeout`` is
  dropped (from the pending queue or from its node's queue). A task that
  started always runs to completion; it counts toward goodput only if it
  finished by ``arrival + timeout``. That is :data:`DEADLINES` ``"start"``,
  the default. ``"dispatch"``: a scheduler must *pick* the task by its
  deadline (the hybrid's selector picking it counts); once picked it is
  placed and runs (a node queue holds at most ``queue`` tasks,
  so it starts soon after). Under sustained overload ``"start"`` wastes
  work: a FIFO-within-tenant backlog is always nearly a timeout old, so most
  placed tasks expire in node queues or finish late, and goodput collapses
  for every scheduler; ``"dispatch"`` sheds load at the scheduler only.
* Hooks: OnArrival when a task reaches the scheduler; OnDispatch when it is
  bound to a node; OnFinish when a dispatched task leaves its node, finished
  or dropped (so state such as DRF's allocation is always released).
* Preemption (a policy with ``Preempt``): a running preemptible task may be
  stopped after its grace to free its executor for a waiting task; it runs
  OnPreempt (OnFinish without one) and waits again (see
  :mod:`ray_adaptive.sim.preemption`).
"""

from __future__ import annotations

from collections import deque
from typing import Optional

from ray_adaptive.plan.room import has_room, slots_of
from ray_adaptive.workload.specs import DEADLINES, NodeSpec, TaskSpec

__all__ = ["Task", "Node", "DEADLINES"]


class Task:
    """A task's life in one run: ``pending`` -> ``queued`` -> ``running`` -> ``finished``,
    or ``dropped`` from pending/queued."""

    __slots__ = ("spec", "id", "arrival", "fields", "status", "node", "dispatched_at", "started_at", "finished_at",
                 "run", "preemptions", "stopped", "nominee", "doomed_by")

    def __init__(self, spec: TaskSpec):
        self.spec = spec
        # the TaskView protocol of the interpreter, copied from the (frozen) spec: read at every decision
        self.id, self.arrival, self.fields = spec.id, spec.arrival, spec.fields
        self.status = "pending"
        self.node: Optional[Node] = None
        self.dispatched_at = self.started_at = self.finished_at = None
        # preemption (docs/language.md, Preemption): runs started (a finish event of an earlier run is stale),
        # times preempted, the runs a preemption cut short ((node id, start, stop): the work it wasted), the
        # victim this waiting task displaces once the victim's grace ends, the waiting task this one yields to
        self.run = 0
        self.preemptions = 0
        self.stopped: list = []
        self.nominee: Optional["Task"] = None
        self.doomed_by: Optional["Task"] = None

    @property
    def started(self) -> float:
        """When its current run started (the VictimView of ``Preempt``)."""
        return self.started_at

    @property
    def wasted_s(self) -> float:
        """Seconds of runs that a preemption cut short."""
        return sum(stop - start for _, start, stop in self.stopped)

    @property
    def on_time(self) -> bool:
        return self.status == "finished" and self.finished_at <= self.spec.deadline + 1e-12

    def __repr__(self) -> str:
        return f"Task({self.id!r}, {self.status})"


class Node:
    """A node's state in one run (the NodeView protocol of the interpreter)."""

    def __init__(self, spec: NodeSpec, index: int):
        self.spec = spec
        self.index = index
        # static attributes copied from the (frozen) spec: read at every decision
        self.id, self.executors, self.queue = spec.id, spec.executors, spec.queue
        self.resources, self.fields = spec.resources, spec.fields
        self.slots = slots_of(spec.executors, spec.queue)
        self.load = 0  # tasks queued + running (what get_load(node) returns), counted by hold()
        # the room rule's verdict, kept as the load changes: read at every decision, for every node
        self.has_room = has_room(self.load, self.slots)
        self.running: list[Task] = []
        self.waiting: deque[Task] = deque()
        self._held: dict[str, float] = {}

    @property
    def available(self) -> dict:
        return {r: total - self._held.get(r, 0.0) for r, total in self.spec.resources.items()}

    def fits(self, task: Task) -> bool:
        res = self.spec.resources
        held = self._held
        return all(res.get(r, 0.0) - held.get(r, 0.0) >= amount - 1e-9 for r, amount in task.spec.resources.items())

    def hold(self, task: Task, sign: int) -> None:
        """``task`` enters (+1) or leaves (-1) the node: its load and the resources it holds."""
        self.load += sign
        self.has_room = has_room(self.load, self.slots)
        for r, amount in task.spec.resources.items():
            self._held[r] = self._held.get(r, 0.0) + sign * amount

    def __repr__(self) -> str:
        return f"Node({self.id!r}, load={self.load})"
