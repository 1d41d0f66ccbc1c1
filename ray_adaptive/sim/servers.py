"""The simulator's schedulers: each a single-threaded server around the plan's own scheduler.

A :class:`Server` wraps a :class:`~ray_adaptive.plan.Scheduler` (its queue,
scoring and State: the runtime's) with what simulation adds: an inbox of
finish notifications and syncs, the busy time its plan's
:class:`~ray_adaptive.plan.RoleCosts` charge, a load view, and counters.
:func:`build_servers` makes a plan's selector and k schedulers -- each of
the k when first used (:class:`Servers`): on a thousand nodes, a workload
whose tasks reach a few schedulers costs a few, not a thousand;
:func:`assign_homes` says at which scheduler each task of a decentralized
plan enters.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Callable, Optional, Sequence

import numpy as np

from ray_adaptive.plan import Architecture, LoadKind, LoweredPlan, Role, RoleCosts, Scheduler, SyncKind
from ray_adaptive.plan.queue import PendingQueue
from ray_adaptive.plan.replicas import copy_state
from ray_adaptive.plan.scoring import scoring_for
from ray_adaptive.sim.heartbeats import CachedView, Heartbeats, LoadHistory
from ray_adaptive.sim.model import Node, Task
from ray_adaptive.sim.results import SchedulerStats

__all__ = ["Server", "build_servers", "assign_homes"]


class Server:
    """One scheduler instance: the plan's scheduler (queue, scoring, State) as a simulated server."""

    def __init__(self, name: str, role: Role, costs: RoleCosts, core: Scheduler, rng, order: int = 0):
        self.name, self.role, self.costs, self.core, self.rng = name, role, costs, core, rng
        self.order = order  # the selector first, then the k schedulers: the order events about them are made
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
        self.ticking = True  # its next sync round is scheduled, or it has none (else: dormant, see PlanSim)
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

    def candidates(self, plan: LoweredPlan, nodes: Sequence[Node], with_room: Callable[[], list], now: float) -> list:
        """The nodes this server sees with room, per its plan's load view."""
        kind = plan.load.kind
        if kind is LoadKind.PROBE:
            return with_room()
        if kind is LoadKind.SAMPLE:
            n = len(nodes)
            d = min(plan.load.d, n)
            picks = sorted(self.rng.choice(n, size=d, replace=False)) if d < n else range(n)
            return [nodes[i] for i in picks if nodes[i].has_room]
        return self.view.candidates(now)


def _server(name: str, role: Role, costs: RoleCosts, program, key, scoring, rng, num_nodes: int,
            fifo: bool = False, order: int = 0, state: Optional[dict] = None) -> Server:
    core = Scheduler(program, (), hooks=False, num_nodes=num_nodes, queue=PendingQueue(key, fifo=fifo), scoring=scoring)
    if state is not None:  # (a plan switched to: the State handed over, for the variables this program declares)
        own = core.interp.state
        own.update(copy_state({v: x for v, x in state.items() if v in own}))
    return Server(name, role, costs, core, rng, order)


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


def build_servers(plan: LoweredPlan, nodes: Sequence[Node], seed: int, key: Callable, scoring,
                  task_key: Optional[Callable], resources: bool, history: LoadHistory,
                  state: Optional[dict] = None) -> tuple[Optional[Server], Servers]:
    """A plan's selector (None for decentralized) and its k schedulers, each with its costs, State and view.

    ``key`` / ``scoring``: how the whole policy's Score groups and scores tasks (the centralized
    and decentralized schedulers'); ``task_key``: the hybrid selector's groups. Each server's
    random numbers are its own (seeded by the run's seed and its place: the selector, then the
    k schedulers), so making them lazily changes nothing. ``state``: the State every server
    starts from (a live switch's handover; None: the policy's initial State).
    """
    n, arch = len(nodes), plan.architecture
    first = 1 if arch is Architecture.DECENTRALIZED else 2  # (the selector takes seed 1)

    def rng(i: int):
        return np.random.default_rng([seed, i])

    attempt_s = lambda costs: costs.compute_s + costs.probe_s * plan.load.probes(n)  # noqa: E731 -- one attempt
    heartbeats = Heartbeats(plan.load.period_s, seed) if plan.load.kind is LoadKind.CACHED else None
    central: Optional[Server] = None
    if arch is Architecture.CENTRALIZED:
        central = _server("selector", Role.SELECTOR, plan.central, plan.policy, key, scoring, rng(1), n, state=state)
        if heartbeats is not None:
            central.view = CachedView(list(nodes), heartbeats, 0, history)
    elif arch is Architecture.HYBRID:  # the selector picks by the task part alone: no node, no resource fit
        central = _server("selector", Role.SELECTOR, plan.central, plan.task_policy, task_key,
                          scoring_for(plan.task_policy, plan.task_split, False, task_key), rng(1), n, state=state)
    if central is not None:
        central.attempt_s = attempt_s(central.costs)
    k = plan.k(n) if arch is not Architecture.CENTRALIZED else 0
    program = plan.policy if arch is Architecture.DECENTRALIZED else plan.node_policy
    local_scoring = None
    if arch is not Architecture.CENTRALIZED:
        local_scoring = scoring if arch is Architecture.DECENTRALIZED else scoring_for(
            plan.node_policy, plan.node_split, resources)
    shared: list = []  # instant sync: one store, every replica is the same State

    def make(i: int) -> Server:
        s = _server(f"s{i}", Role.SCHEDULERS, plan.local, program, key, local_scoring, rng(first + i), n,
                    fifo=arch is Architecture.HYBRID, order=1 + i, state=state)
        if plan.sync.kind is SyncKind.INSTANT:
            if not shared:
                shared.append(s.interp.state)
            s.interp.state = shared[0]
        s.attempt_s = attempt_s(s.costs)
        if heartbeats is not None:
            s.view = CachedView(list(nodes), heartbeats, i, history)
        return s

    return central, Servers(k, make)


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
