"""Cached load views: what a scheduler learns of node loads from periodic heartbeats.

A scheduler with a ``cached`` load view (:class:`~ray_adaptive.plan.LoadView`)
sees each node's load as of its last heartbeat round plus its own
dispatches since. Rounds come every period, each at a pseudo-random offset
within its period (a hash of the seed, the scheduler and the round), so no
scheduler is systematically the first to learn of a free slot.

Nothing is scheduled per round: a round's time is computed when asked, and
a view is brought up to date only when its scheduler looks (a decision
attempt), from each node's load history. An idle scheduler costs nothing,
however many rounds pass.

Example:
    >>> hb = Heartbeats(period_s=0.01, seed=0)
    >>> t = hb.first_from(0, 0.0)
    >>> 0.0 <= t < 0.01, hb.last(0, t) == t, hb.count(0, 0.0, 0.1)
    (True, True, 10)
"""

from __future__ import annotations

import bisect
import math
from typing import List

import numpy as np

from ray_adaptive.plan.nodeset import NodeSet
from ray_adaptive.plan.room import has_room
from ray_adaptive.sim.model import Node

__all__ = ["Heartbeats", "LoadHistory", "ViewNode", "CachedView"]


class Heartbeats:
    """The heartbeat rounds of every scheduler of a run (scheduler ``i``'s round ``j`` at :meth:`tick`)."""

    def __init__(self, period_s: float, seed: int):
        self.period_s = period_s
        self._seed = seed

    def tick(self, i: int, j: int) -> float:
        """Time of round ``j`` of scheduler ``i``: somewhere in period ``j``, at a pseudo-random offset."""
        x = (self._seed * 0x9E3779B1 + i * 0x85EBCA77 + j * 0xC2B2AE3D) & 0xFFFFFFFF
        x ^= x >> 15
        x = (x * 0x2C1B3C6D) & 0xFFFFFFFF
        x ^= x >> 12
        return (j + x / 2.0 ** 32) * self.period_s

    def last(self, i: int, t: float) -> float:
        """The latest round of ``i`` at or before ``t`` (-inf before the first)."""
        j = math.floor(t / self.period_s)
        for k in (j, j - 1):
            if k >= 0 and self.tick(i, k) <= t:
                return self.tick(i, k)
        return -math.inf

    def next(self, i: int, t: float) -> float:
        """The first round of ``i`` after ``t``."""
        j = math.floor(t / self.period_s)
        for k in (j, j + 1):
            if self.tick(i, k) > t:
                return self.tick(i, k)
        return self.tick(i, j + 2)

    def first_from(self, i: int, t: float) -> float:
        """The first round of ``i`` at or after ``t``."""
        j = math.floor(t / self.period_s)
        first = self.tick(i, j)
        return first if first >= t else self.tick(i, j + 1)

    def count(self, i: int, start: float, end: float) -> int:
        """Rounds of ``i`` in [start, end)."""
        h = self.period_s
        return sum(1 for k in range(max(0, math.floor(start / h)), math.floor(end / h) + 1)
                   if start <= self.tick(i, k) < end)


class LoadHistory:
    """Each node's load over a run (what a heartbeat round reports, read back at a recent time).

    A log of load changes; the loads at ``t`` are the loads now with the
    changes after ``t`` undone. Heartbeat views read back less than a period,
    so that costs the changes of the last period, not a pass over the nodes.
    """

    def __init__(self, nodes: List[Node]):
        self._nodes = nodes
        self.reset()

    def reset(self) -> None:
        """Start the history afresh from the nodes' loads now (a run prefilled before it starts)."""
        self.now = np.array([n.load for n in self._nodes], dtype=np.int64)
        self._times: list[float] = []
        self._index: list[int] = []
        self._before: list[int] = []  # the node's load before the change

    def record(self, node: Node, now: float) -> None:
        i = node.index
        self._times.append(now)
        self._index.append(i)
        self._before.append(int(self.now[i]))
        self.now[i] = node.load

    def loads_at(self, t: float, out: np.ndarray) -> None:
        """``out[:]`` = every node's load at time ``t`` (their loads at the start, before any change)."""
        k = bisect.bisect_right(self._times, t)
        np.copyto(out, self.now)
        if k < len(self._times):
            index = np.array(self._index[k:])
            first = np.unique(index, return_index=True)[1]  # each node's earliest change after t
            out[index[first]] = np.array(self._before[k:])[first]

    def at(self, index: int, t: float) -> int:
        """Node ``index``'s load at time ``t``."""
        k = bisect.bisect_right(self._times, t)
        for j in range(k, len(self._times)):
            if self._index[j] == index:
                return self._before[j]
        return int(self.now[index])


class ViewNode:
    """A node as a scheduler with cached loads sees it (the interpreter's NodeView): its load is the view's."""

    __slots__ = ("node", "id", "index", "executors", "queue", "slots", "resources", "fields", "_loads")

    def __init__(self, node: Node, loads: np.ndarray):
        self.node = node
        self.id, self.index, self.executors, self.queue = node.id, node.index, node.executors, node.queue
        self.slots = node.slots
        self.resources, self.fields, self._loads = node.resources, node.fields, loads

    @property
    def load(self) -> int:
        return int(self._loads[self.index])

    @property
    def available(self) -> dict:
        return self.node.available

    def fits(self, task) -> bool:
        return self.node.fits(task)


class CachedView:
    """One scheduler's view: loads as of its last heartbeat round, plus its own dispatches since."""

    def __init__(self, nodes: List[Node], heartbeats: Heartbeats, index: int, history: LoadHistory):
        self.loads = np.zeros(len(nodes), dtype=np.int64)
        self.slots = np.array([n.slots for n in nodes], dtype=np.int64)
        self.nodes = [ViewNode(n, self.loads) for n in nodes]
        self._hb, self.index, self._history = heartbeats, index, history
        self._tick = -math.inf  # the round the loads are as of
        self._next = -math.inf  # the first round after the view was last brought up to date
        self._own: list[tuple[float, int]] = []  # own dispatches: (time, node index)

    def candidates(self, now: float) -> "NodeSet | list[ViewNode]":
        """The nodes with room as this scheduler sees them at ``now``."""
        if now >= self._next:  # a heartbeat round may have come since the view was last brought up to date
            tick = self._hb.last(self.index, now)
            if tick != self._tick:
                self._tick = tick
                self._history.loads_at(tick, self.loads)  # (in place: the view nodes read this array)
                self._own = [x for x in self._own if x[0] > tick]
                for _, i in self._own:
                    self.loads[i] += 1
            self._next = self._hb.next(self.index, now)
        idx = np.flatnonzero(has_room(self.loads, self.slots))
        if len(self.nodes) <= 32:  # (as the cluster's candidates: a few nodes go faster as a list)
            return [self.nodes[i] for i in idx.tolist()]
        return NodeSet(self.nodes, idx, self.loads[idx])

    def dispatched(self, node: Node, now: float) -> None:
        """This scheduler sent a task to ``node``: it counts it until a round reports it."""
        self.loads[node.index] += 1
        self._own.append((now, node.index))

    def next_round(self, now: float) -> float:
        return self._hb.next(self.index, now)

    def rounds_during(self, start: float, end: float) -> int:
        return self._hb.count(self.index, start, end)

    def first_round_from(self, t: float) -> float:
        return self._hb.first_from(self.index, t)
