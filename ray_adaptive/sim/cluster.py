"""The mechanics of the cluster model (see :mod:`ray_adaptive.sim.model`) on an event loop."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ray_adaptive.plan.nodeset import NodeSet
from ray_adaptive.plan.room import has_room, slots_of
from ray_adaptive.sim.events import FINISH, EventLoop
from ray_adaptive.sim.model import Node, NodeSpec, Task


SMALL = 32  # nodes up to which candidates are a plain list


class Cluster:
    """Nodes that run dispatched tasks FIFO on their executors.

    ``on_leave(task)`` is called when a dispatched task leaves its node
    (finished or dropped); the scheduler reacts to it. ``loads`` mirrors
    every node's load in one array (``load`` counts the tasks queued and
    running on all of them), so the nodes with room are found without a
    pass over the node objects.
    """

    def __init__(self, specs: Sequence[NodeSpec], loop: EventLoop, on_leave: Callable[[Task], None]):
        self.nodes = [Node(s, i) for i, s in enumerate(specs)]
        self.loop = loop
        self.on_leave = on_leave
        self.loads = np.zeros(len(self.nodes), dtype=np.int64)  # (kept on a large cluster only: see with_room)
        self.slots = np.array([n.slots for n in self.nodes], dtype=np.int64)
        self.total_slots = int(self.slots.sum())
        self.load = 0
        self._large = len(self.nodes) > SMALL

    def set_member(self, node: Node, member: bool) -> None:
        """``node`` joins the cluster (its slots back) or is drained (no slot: no scheduler places a task
        there; what it runs and queues finishes), see :mod:`ray_adaptive.sim.membership`."""
        node.slots = slots_of(node.executors, node.queue) if member else 0
        node.has_room = has_room(node.load, node.slots)
        self.slots[node.index] = node.slots
        self.total_slots = int(self.slots.sum())

    def candidates(self) -> list[Node]:
        """Nodes that can take one more task (resource fit is checked per task)."""
        return [n for n in self.nodes if n.has_room]

    def with_room(self) -> "NodeSet | list[Node]":
        """The nodes that can take one more task: a :class:`NodeSet` on a large cluster, a list on a
        small one (a few nodes are scored faster one by one than through numpy)."""
        if not self._large:
            return [x for x in self.nodes if x.has_room]
        idx = np.flatnonzero(has_room(self.loads, self.slots))
        return NodeSet(self.nodes, idx, self.loads[idx])

    @property
    def free(self) -> int:
        """Slots free over the whole cluster."""
        return self.total_slots - self.load

    def _hold(self, task: Task, node: Node, sign: int) -> None:
        node.hold(task, sign)
        if self._large:
            self.loads[node.index] += sign
        self.load += sign

    def dispatch(self, task: Task, node: Node, first: bool = False) -> None:
        """``task`` joins ``node``'s FIFO queue; ``first``: at its head (a preemptor takes the executor its
        victim just left, see :meth:`stop`)."""
        if not node.has_room or not node.fits(task):
            raise RuntimeError(f"{task} dispatched to {node} which is not a candidate (a scheduler bug)")
        task.status, task.node, task.dispatched_at = "queued", node, self.loop.now
        self._hold(task, node, +1)
        if first:
            node.waiting.appendleft(task)
        else:
            node.waiting.append(task)
        self._start_ready(node)

    def stop(self, task: Task) -> Node:
        """Preempt a running task: it leaves its node (its finish event goes stale) and is pending again.
        Its executor is not refilled here: the preemptor is dispatched ``first`` right after; the caller runs
        the hooks and calls :meth:`refill` if it dispatches nothing."""
        node = task.node
        node.running.remove(task)
        self._hold(task, node, -1)
        task.stopped.append((node.id, task.started_at, self.loop.now))
        task.status, task.node, task.preemptions = "pending", None, task.preemptions + 1
        task.dispatched_at = task.started_at = None
        return node

    def refill(self, node: Node) -> None:
        """Start what waits on ``node`` in its free executors."""
        self._start_ready(node)

    def drop(self, task: Task) -> None:
        """Drop a task queued at its node (it has not started)."""
        node = task.node
        node.waiting.remove(task)
        self._hold(task, node, -1)
        task.status = "dropped"
        self.on_leave(task)

    def _start_ready(self, node: Node) -> None:
        while node.waiting and len(node.running) < node.executors:
            task = node.waiting.popleft()
            task.status, task.started_at = "running", self.loop.now
            task.run += 1
            node.running.append(task)
            self.loop.after(task.spec.duration, FINISH, self._finish, task, task.run)

    def _finish(self, task: Task, run: int) -> None:
        if task.run != run or task.status != "running":
            return  # the run was preempted (a new run has its own event)
        node = task.node
        node.running.remove(task)
        self._hold(task, node, -1)
        task.status, task.finished_at = "finished", self.loop.now
        self._start_ready(node)
        self.on_leave(task)
