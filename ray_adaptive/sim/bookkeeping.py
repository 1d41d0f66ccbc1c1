"""A plan simulation's books: what a run keeps whatever plan is in force, and the events that are not a scheduler's.

:class:`Books` holds the cluster, the clock, every task and who holds it
(the global pending queue; which scheduler has a task queued, has picked
it, has forwarded it, is told of its finish), the *truth* (the policy's
State with every hook run at its true moment), the competitive-ratio
samples and the metrics' window. It handles what happens to a task
outside the schedulers -- its arrival (handed to the role where tasks
enter), its deadline, its leaving its node (the finish handed to the roles
that handle finishes, a freed slot to the schedulers waiting for one) --
and the common effect of a placement. The roles' hosts
(:mod:`ray_adaptive.sim.hosts`) do the rest; a live switch replaces them
and keeps these books.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import numpy as np

from ray_adaptive.dsl.interp import Interpreter
from ray_adaptive.dsl.ir import Policy
from ray_adaptive.plan.kinds import LoadKind
from ray_adaptive.plan.queue import PendingQueue
from ray_adaptive.plan.scoring import row_key, scoring_for
from ray_adaptive.sim import metrics as M
from ray_adaptive.sim.cluster import Cluster
from ray_adaptive.sim.events import ARRIVAL, DECIDE, TIMEOUT, EventLoop
from ray_adaptive.sim.heartbeats import LoadHistory
from ray_adaptive.sim.model import Node, Task
from ray_adaptive.sim.plan_preemption import preemption_for, waiting_again
from ray_adaptive.sim.preemption import release
from ray_adaptive.sim.ratio import RatioSampler
from ray_adaptive.sim.servers import Server
from ray_adaptive.workload.scenario import Scenario
from ray_adaptive.workload.specs import NodeSpec

__all__ = ["Books"]


def _arrival(task: Task) -> float:
    return task.arrival


class Books:
    """The run's bookkeeping and its task events (see the module doc). ``hosts`` (the roles of the plan
    in force, selector first) and ``hooks`` (its :class:`~ray_adaptive.sim.replication.HookRunner`) are
    set when a plan is put in force."""

    def __init__(self, policy: Policy, scenario: Scenario, seed: int, warmup: float, deadline: str,
                 record_cr: bool, cr_from: float, cr_every: int, settle: Optional[M.Settle],
                 joining: Sequence[NodeSpec] = ()):
        """``joining``: nodes that join the run later (:mod:`ray_adaptive.sim.membership`), not members yet."""
        self.deadline = deadline
        self.loop = EventLoop()
        self.cluster = Cluster((*scenario.nodes, *joining), self.loop, self._on_leave)
        self.nodes = self.cluster.nodes  # every node ever in the run (indices into the cluster's arrays)
        for node in self.nodes[len(scenario.nodes):]:
            self.cluster.set_member(node, False)
        #: the nodes of the plan in force: those in the cluster now (in index order)
        self.members: list[Node] = self.nodes[:len(scenario.nodes)]
        self.total_slots = self.cluster.total_slots
        self.tasks = [Task(spec) for spec in scenario.tasks]
        self.any_resources = any(t.spec.resources for t in self.tasks)
        self.rng = np.random.default_rng(seed)
        self.record_cr, self.cr_from = record_cr, cr_from
        self.settle, self.stopped_at = settle, None
        self.truth = Interpreter(policy, num_nodes=len(self.members))
        self.keys: dict = {}  # task -> group key, per set of task attributes read
        self.key = self.key_of(policy)
        self.gp = PendingQueue(self.key)  # every task arrived, not yet dispatched nor dropped
        self.on_arrival = any(h.name == "OnArrival" for h in policy.hooks)
        self.placed_by: dict[str, str] = {}
        self.owner: dict[Task, Server] = {}  # scheduler that dispatched the task (told of its finish)
        self.where: dict[Task, Server] = {}  # scheduler holding the task in its pending queue
        self.forwarded: dict[Task, float] = {}  # picked by a forwarding role (when), not placed yet
        self.claimed: set[Task] = set()  # picked by a scheduler, being sent
        self.paid: dict[Task, Server] = {}  # who has paid the receive cost of a task
        self.holders: set[Server] = set()  # schedulers where tasks enter with tasks in their pending queue
        self.forwards = 0  # tasks forwarded so far (the next placement scheduler in turn: this modulo k)
        self.unresolved = len(self.tasks)
        self.history = LoadHistory(self.nodes)  # each node's load over time (for cached views)
        self.record_loads = False  # the plan in force has cached views, which read the history
        self._waiting: dict[int, tuple[Server, Callable]] = {}  # schedulers waiting for room: by order, their wake
        self.frozen = False  # a switch's pause: no scheduler works
        self._scorings: dict = {}
        self.hosts: list = []  # the roles of the plan in force (see put_in_force)
        self.entry = self.forwarder = None
        self._finishers: list = []
        self.hooks = None
        self.preemption = preemption_for(self)  # (None: the policy never preempts)
        # the ideal's scoring (the competitive ratio's): the first plan's, whatever plan is in force later
        self.ratio: Optional[RatioSampler] = None
        self._cr_every = cr_every
        self.ended_at = math.inf  # when the last task was resolved
        self.window = (warmup, max((t.arrival for t in self.tasks), default=0.0) + 1e-9)
        if self.window[0] >= self.window[1]:
            raise ValueError(f"warmup ({warmup} s) must end before the last arrival ({self.window[1]:.3f} s)")
        self.warm: set[Task] = set()

    def start(self, ideal_scoring) -> None:
        """The first plan is in force: sample the ratio with ``ideal_scoring``, schedule the first arrival.
        Arrivals are scheduled one at a time, each by the one before (ties in scenario order), and a
        task's timeout when it arrives: a heap of what is due soon, not of the whole scenario."""
        self.ratio = RatioSampler(self.truth, ideal_scoring, self.gp, self.cluster.with_room,
                                  lambda: self.cluster.free, self._cr_every)
        self._arrivals = iter(sorted(self.tasks, key=_arrival))
        self._next_arrival()

    def put_in_force(self, hosts: list, hooks) -> None:
        """A plan's role hosts (selector first) and its hook runner take over the run's tasks."""
        self.hosts, self.hooks = hosts, hooks
        self.entry = next(h for h in hosts if h.spec.entry)  # where tasks enter
        self.forwarder = next((h for h in hosts if h.spec.forwards), None)
        self._finishers = [h for h in hosts if h.spec.finishes]  # (in order: the selector is told first)
        self.record_loads = any(h.spec.view.kind is LoadKind.CACHED for h in hosts)

    # ------------------------------------------------------------- scoring
    def key_of(self, program: Policy) -> Optional[Callable]:
        """How a pending queue groups tasks for ``program``'s Score (with the resource fit if tasks ask
        for resources), cached per task for the run."""
        return row_key(program.score, self.any_resources, cache=True, shared=self.keys)

    def scoring(self, program: Policy, split, resources: bool, group: Optional[Callable]):
        """``program``'s scoring: one object for every role and plan that scores alike, so that what its
        parts remember serves them all."""
        k = (id(program), id(split), resources, id(group))
        got = self._scorings.get(k)
        if got is None:
            got = self._scorings[k] = (scoring_for(program, split, resources, group), program, split, group)
        return got[0]

    # ------------------------------------------------------------- arrivals
    def _next_arrival(self) -> None:
        task = next(self._arrivals, None)
        if task is not None:
            self.loop.at(task.arrival, ARRIVAL, self._arrive, task)

    def _arrive(self, task: Task) -> None:
        self._next_arrival()
        if math.isfinite(task.spec.timeout):
            self.loop.at(task.spec.deadline, TIMEOUT, self.timeout, task)
        if self.on_arrival:
            self.hooks.run(self.truth, "OnArrival", task, None, self.loop.now)
        self.gp.add(task)
        entry = self.entry
        entry.deliver(entry.entry_for(task), task)

    # ------------------------------------------------------------ deadlines
    def timeout(self, task: Task) -> None:
        if waiting_again(task):
            return  # it started in time; a preemption does not take its result away (sim.preemption, rule 6)
        if task.status == "pending":
            release(task)  # (a waiting task dropped, or placed in time, spares the victim it chose)
            if self.deadline == "dispatch" and (task in self.claimed or task in self.forwarded):
                return  # a scheduler committed to it in time: it will be placed
            task.status = "dropped"
            self.resolve()
            self.gp.remove(task)
            s = self.where.pop(task, None)
            if s is not None:
                s.pending.remove(task)
                if not s.pending:
                    self.holders.discard(s)
            if task in self.forwarded:  # the forwarding role counted it and ran OnDispatch
                self.forwarder.finished(task)
        elif task.status == "queued" and self.deadline == "start":
            self.cluster.drop(task)

    def resolve(self) -> None:
        self.unresolved -= 1
        if self.unresolved <= 0:
            self.ended_at = self.loop.now

    # --------------------------------------------------------------- leaves
    def _on_leave(self, task: Task) -> None:
        if self.record_loads:
            self.history.record(task.node, self.loop.now)
        release(task)  # a victim that finished within its grace
        if task not in self.warm:
            self.resolve()
        self.hooks.run(self.truth, "OnFinish", task, task.node, self.loop.now)
        for host in self._finishers:
            host.finished(task)
        self._room_freed()

    def wait_for_room(self, s: Server, wake: Callable[[Server], None]) -> None:
        """``s`` found no room: ``wake(s)`` when a slot frees."""
        self._waiting[s.order] = (s, wake)

    def stop_waiting(self, s: Server) -> None:
        self._waiting.pop(s.order, None)

    def _room_freed(self) -> None:
        """A slot freed: the schedulers waiting for one try again, each after a random fraction of an
        attempt (its polling phase)."""
        for order in sorted(self._waiting):
            s, wake = self._waiting[order]
            delay = float(s.rng.uniform(0.0, s.attempt_s))
            self.loop.after(delay, DECIDE, wake, s)

    # ----------------------------------------------------------- placements
    def place(self, s: Server, task: Task, node: Node, decided_at: float, deciders: int,
              first: bool = False) -> Optional[tuple]:
        """``s`` dispatches ``task`` to ``node`` now: the cluster, the global queue, who placed it, the
        truth's OnDispatch. Returns the competitive-ratio sample to :meth:`record` once the
        scheduler's own State has run its hook (None: not sampled). ``first``: onto the executor a
        preempted victim left (not sampled, see :mod:`ray_adaptive.sim.plan_preemption`)."""
        now = self.loop.now
        sample = (self.ratio.sample(task, node, self.forwarded.get(task, decided_at), now, deciders)
                  if self.record_cr and now >= self.cr_from and not first else None)
        release(task)  # placed: the victim it chose, if any, is spared
        if first:
            self.cluster.dispatch(task, node, first=True)
        else:
            self.cluster.dispatch(task, node)
        if self.record_loads:
            self.history.record(node, now)
        self.gp.remove(task)
        self.forwarded.pop(task, None)
        s.decisions += 1
        self.owner[task] = s
        self.placed_by[task.id] = s.name
        self.hooks.run(self.truth, "OnDispatch", task, node, now)
        return sample

    def record(self, sample: tuple) -> None:
        now = self.loop.now
        self.ratio.record(sample, now)
        if self.settle is not None and len(self.ratio) % self.settle.batch == 0:
            self._maybe_stop()

    def _maybe_stop(self) -> None:
        """End the run here if the competitive ratio is settled above the limit; the metrics' window ends
        here too."""
        if self.settle.done(self.ratio.impl, self.ratio.ideal, self.ratio.times):
            self.stopped_at = self.loop.now
            self.window = (self.window[0], max(min(self.window[1], self.loop.now), self.window[0] + 1e-9))
            self.loop.stop()

    def recv_cost(self, s: Server, task: Task) -> float:
        """What receiving ``task`` costs ``s``: charged once, with the first decision that sends it on."""
        if self.paid.get(task) is s:
            return 0.0
        self.paid[task] = s
        return s.costs.recv_s

    def set_members(self, join: Sequence[str], leave: Sequence[str]) -> None:
        """Nodes join the cluster and leave it (drained), by id: the members, the slots, the truth's node count."""
        by_id = {n.id: n for n in self.nodes}
        for nid in join:
            self.cluster.set_member(by_id[nid], True)
        for nid in leave:
            self.cluster.set_member(by_id[nid], False)
        gone = set(leave) - set(join)
        ids = {n.id for n in self.members} - gone | set(join)
        self.members = [n for n in self.nodes if n.id in ids]
        self.total_slots = self.cluster.total_slots
        self.truth.num_nodes = len(self.members)

    def hand_over(self) -> list[Task]:
        """A switch: forget every decision in flight and every waiting scheduler; the undecided tasks."""
        self.where.clear(), self.claimed.clear(), self.forwarded.clear(), self.paid.clear()
        self._waiting.clear(), self.holders.clear()
        return self.gp.tasks()
