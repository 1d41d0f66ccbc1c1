"""The simulator's schedulers: each a single-threaded server around the plan's own scheduler.

A :class:`Server` wraps a :class:`~ray_adaptive.plan.Scheduler` (its queue,
scoring and State: the runtime's) with what simulation adds: an inbox of
finish notifications and syncs, the busy time its plan's
:class:`~ray_adaptive.plan.RoleCosts` charge, a load view, and counters.
A role of k schedulers makes each when first used (:class:`Servers`): on a
thousand nodes, a workload whose tasks reach a few schedulers costs a few,
not a thousand; :func:`assign_homes` says at which of the k each task
enters when tasks enter at their submitter's own scheduler. The hosts of
:mod:`ray_adaptive.sim.hosts` make and drive them.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Callable, Optional, Sequence

from ray_adaptive.plan import Role, RoleCosts, Scheduler
from ray_adaptive.sim.heartbeats import CachedView
from ray_adaptive.sim.model import Node, Task
from ray_adaptive.sim.results import SchedulerStats

__all__ = ["Server", "Servers", "assign_homes"]


class Server:
    """One scheduler instance: the plan's scheduler (queue, scoring, State) as a simulated server."""

    def __init__(self, name: str, role: Role, costs: RoleCosts, core: Scheduler, rng, order: int = 0,
                 sample_d: int = 0):
        self.name, self.role, self.costs, self.core, self.rng = name, role, costs, core, rng
        self.order = order  # the selector first, then the k schedulers: the order events about them are made
        self.sample_d = sample_d  # power-of-d: nodes looked at per decision attempt (0: every node)
        self.interp = core.interp
        self.pending = core.queue
        self.inbox: deque = deque()
        self.busy = False
        self.blocked = False
        self.busy_s = 0.0
        self.received = self.attempts = self.failed = self.bounces = self.decisions = 0
        self.view: Optional[CachedView] = None  # a cached load view (None: probe or sample)
        self.attempt_s = 0.0  # busy time of one decision attempt
        self.wake_at = -math.inf
        self.unpushed: dict = {}
        self.sync_queued = False  # a periodic sync waits in the inbox or runs
        self.next_tick = math.inf  # periodic sync: the next round not yet run
        self.ticking = True  # its next sync round is scheduled, or it has none (else: dormant, see sim.sync_rounds)
        self.retired = False  # replaced by a live switch: the events still due for it are no-ops

    def stats(self, extra_busy: float = 0.0) -> SchedulerStats:
        return SchedulerStats(self.name, self.role, self.busy_s + extra_busy, self.received, self.attempts,
                              self.failed, self.bounces, self.decisions)

    def work_time(self, cost: float, now: float) -> float:
        """How long work of ``cost`` seconds starting ``now`` keeps this server busy: heartbeat rounds that
        arrive while it works extend it (idle time absorbs the others)."""
        if self.view is None or self.costs.heartbeat_s <= 0:
            return cost
        counted, end = 0, now + cost
        if self.view.first_round_from(now) < end:  # mostly not: work lasts a fraction of the period
            while True:
                n = self.view.rounds_during(now, end)
                if n == counted:
                    break
                end += (n - counted) * self.costs.heartbeat_s
                counted = n
        return end - now

    def candidates(self, nodes: Sequence[Node], with_room: Callable[[], list], now: float) -> list:
        """The nodes this server sees with room: its cached view's, ``sample_d`` of ``nodes``, or the
        cluster's (``with_room``)."""
        if self.view is not None:
            return self.view.candidates(now)
        if self.sample_d:
            n = len(nodes)
            d = min(self.sample_d, n)
            picks = sorted(self.rng.choice(n, size=d, replace=False)) if d < n else range(n)
            return [nodes[i] for i in picks if nodes[i].has_room]
        return with_room()


class Servers(Sequence):
    """A plan's k schedulers, each made when first used (by ``make(i)``; ``on_made(server)`` follows)."""

    def __init__(self, k: int, make: Callable[[int], Server]):
        self._k, self._make = k, make
        self._made: dict[int, Server] = {}
        self.on_made: Optional[Callable[[Server], None]] = None

    def __len__(self) -> int:
        return self._k

    def __getitem__(self, i: int) -> Server:
        s = self._made.get(i)
        if s is None:
            if not 0 <= i < self._k:
                raise IndexError(f"scheduler {i} of {self._k}")
            s = self._made[i] = self._make(i)
            if self.on_made is not None:
                self.on_made(s)
        return s

    def __iter__(self):
        return (self[i] for i in range(self._k))

    def made(self) -> list[Server]:
        """The schedulers used so far, in order."""
        return [self._made[i] for i in sorted(self._made)]


def assign_homes(tasks: Sequence[Task], k: int) -> dict:
    """Task -> the index of the decentralized scheduler it enters at: submitters take homes in order of
    first appearance, modulo k; tasks without a submitter go round-robin."""
    homes: dict[str, int] = {}
    out = {}
    rr = 0
    for t in sorted(tasks, key=lambda x: (x.arrival, x.id)):
        sub = t.spec.submitter
        if sub:
            if sub not in homes:
                homes[sub] = len(homes) % k
            out[t] = homes[sub]
        else:
            out[t] = rr % k
            rr += 1
    return out
