"""Simulate an implementation plan on the cluster model.

The same nodes, queues, timeouts and event order as the ideal replay
(:mod:`ray_adaptive.sim.cluster`, :mod:`ray_adaptive.sim.events`), with
schedulers that take time and see only part of the truth:

* **Schedulers are single-threaded servers.** Each has an inbox (finish
  notifications, heartbeat rounds, state syncs), served first-come
  first-served, and makes decisions when its inbox is empty. Every item and
  every decision attempt keeps it busy for the plan's
  :class:`~ray_adaptive.plan.RoleCosts` -- exactly the latencies the
  compiler estimates, so estimated throughput and simulated goodput agree
  where a scheduler is the bottleneck. A task joins a scheduler's pending
  queue on arrival; its receive cost is charged with the decision that sends
  it on (an overloaded scheduler does not spend itself reading submissions
  that will time out -- no receive livelock).
* **A decision** is the runtime's decision step
  (:meth:`ray_adaptive.plan.Scheduler.pick`: the same pending queue, scoring
  and tie rules), taken on what the scheduler sees when it starts: its own
  pending queue, its replica of State, loads per its
  :class:`~ray_adaptive.plan.LoadView`. The task is sent when the
  attempt ends -- the runtime binds at once, the simulator after the
  attempt's busy time; if the node has filled up meanwhile (another scheduler took
  the slot -- herding) the node refuses it and the task goes back to the
  scheduler's queue (a *bounce*).
* **No room**: a scheduler whose view shows no node with room waits until a
  slot frees (probe/sample views: it is woken, after a random fraction of an
  attempt -- its polling phase) or until the next heartbeat (cached view).
* **Centralized**: one selector, the global pending queue, the exact State.
  **Decentralized**: k schedulers; a task enters at its submitter's home
  scheduler (submitters take homes in order of first appearance, modulo k;
  tasks without a submitter go round-robin); each keeps a replica of State:
  ``instant`` sync shares one store (reads and writes charged), ``periodic``
  pushes local updates and pulls the merged State every period (``add``
  deltas sum, ``max``/``min`` merge, others: last writer wins).
  **Hybrid**: the selector picks the task by the task part of Score (exact
  State; it runs OnDispatch when it forwards and OnFinish on finish
  notifications) and forwards it, only while its slot accounting shows room,
  round-robin to k placement schedulers that pick the node by the node part.
* **Hooks**: a scheduler runs OnArrival / OnDispatch / OnFinish on its own
  State when it handles the message; a separate *truth* interpreter runs them
  at the true moments (arrival, dispatch, leave). That exact global State,
  all pending tasks and the true candidates are what the ideal decision is
  taken on when the **competitive ratio** is sampled: at each decision,
  ``Score_ideal(t_impl, n_impl)`` vs ``Score_ideal(t_ideal, n_ideal)`` (see
  :func:`ray_adaptive.sim.metrics.competitive_ratio`). For a hybrid decision
  (two steps) the ideal chooses among the tasks that had arrived when the
  selector picked.

**Live switches** (:meth:`PlanSim.switch`): a run hands its tasks, State and
running set over to another plan's schedulers, as the runtime's switch does;
the adaptive controller drives that in :mod:`ray_adaptive.sim.adaptive`.

Deterministic for a seed.

Why two drivers of one decision step: the runtime decides in batches, as
fast as real time allows, while the simulator must charge each attempt
its modelled latency before its effect -- a bounce, an inbox served in
between -- so its driver is this event-driven server; the queue, the
scoring and the State hooks are the runtime's own.

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> from ray_adaptive.plan import LoweredPlan, Plan, RoleCosts
    >>> from ray_adaptive.workload import scenario_from_dict
    >>> from ray_adaptive.workload.generate import paper_workload
    >>> plan = LoweredPlan(Plan("centralized", "centralized"), load_policy("drf_lb"),
    ...                    central=RoleCosts(recv_s=7e-4, send_s=7e-4, finish_s=7e-4, probe_s=3.5e-5))
    >>> r = simulate(plan, scenario_from_dict(paper_workload(300, seconds=1.0)))
    >>> r.metrics().goodput > 250
    True
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Optional

import numpy as np

from ray_adaptive.dsl.interp import Interpreter
from ray_adaptive.plan import Architecture, LoadKind, LoweredPlan, Role
from ray_adaptive.plan.nodeset import NodeSet
from ray_adaptive.plan.queue import PendingQueue
from ray_adaptive.plan.replicas import copy_state
from ray_adaptive.plan.scoring import row_key, scoring_for
from ray_adaptive.sim import metrics as M
from ray_adaptive.sim.cluster import Cluster
from ray_adaptive.sim.events import ARRIVAL, DECIDE, TIMEOUT, EventLoop, gc_paused
from ray_adaptive.sim.heartbeats import LoadHistory, ViewNode
from ray_adaptive.sim.model import DEADLINES, Node, Task
from ray_adaptive.sim.ratio import RatioSampler
from ray_adaptive.sim.replication import HookRunner
from ray_adaptive.sim.results import Metrics, SchedulerStats, SimResult
from ray_adaptive.sim.servers import Server, assign_homes, build_servers
from ray_adaptive.workload.scenario import Scenario, check_fields, check_placeable

__all__ = ["simulate", "PlanSim", "SimResult", "SchedulerStats", "Metrics", "periodic_overload"]

_FINISH, _SYNC = "finish", "sync"


def _arrival(task: Task) -> float:
    return task.arrival


class PlanSim:
    """One run of ``plan`` on ``scenario`` (see the module docstring for the model).

    The run's event handlers -- arrivals, timeouts, leaves, each server's
    steps -- in one class, as they share the run's bookkeeping (who holds
    which task, what was forwarded or claimed); the servers, their views,
    State replication and the competitive ratio live in modules of their own.
    """

    def __init__(self, plan: LoweredPlan, scenario: Scenario, seed: int = 0, warmup: float = 0.0,
                 record_cr: bool = True, cr_every: int = 1, deadline: str = "dispatch", prefill: "bool | float" = False,
                 cr_from: float = 0.0, source: str = "<scenario>", settle: Optional[M.Settle] = None,
                 validate: bool = True):
        if validate:
            check_fields(plan.policy, scenario, source)
        check_placeable(scenario, source)  # (a task no node can take would keep the periodic events going forever)
        if deadline not in DEADLINES:
            raise ValueError(f"deadline must be one of {', '.join(DEADLINES)}, found {deadline!r}")
        if cr_every < 1:
            raise ValueError(f"cr_every must be >= 1, found {cr_every}")
        overloaded = periodic_overload(plan)
        if overloaded:
            raise ValueError(f"plan {plan.name!r} cannot run: {overloaded}")
        self.deadline = deadline
        self.seed = seed
        self.loop = EventLoop()
        self.cluster = Cluster(scenario.nodes, self.loop, self._on_leave)
        self.nodes = self.cluster.nodes
        n = len(self.nodes)
        self.total_slots = sum(x.executors + x.queue for x in self.nodes)
        self.tasks = [Task(spec) for spec in scenario.tasks]
        self._any_resources = any(t.spec.resources for t in self.tasks)
        self.rng = np.random.default_rng(seed)
        self.record_cr, self.cr_from = record_cr, cr_from
        self.settle, self.stopped_at = settle, None
        self.truth = Interpreter(plan.policy, num_nodes=n)
        self._keys: dict = {}  # task -> group key, per set of task attributes read
        self._key = row_key(plan.policy.score, self._any_resources, cache=True, shared=self._keys)
        self.gp = PendingQueue(self._key)  # every task arrived, not yet dispatched nor dropped
        self._on_arrival = any(h.name == "OnArrival" for h in plan.policy.hooks)
        self.placed_by: dict[str, str] = {}
        self.owner: dict[Task, Server] = {}  # scheduler that dispatched the task (gets its finish notification)
        self.where: dict[Task, Server] = {}  # scheduler holding the task in its pending queue
        self.forwarded: dict[Task, float] = {}  # hybrid: selector's decision time
        self.unresolved = len(self.tasks)
        self.claimed: set[Task] = set()  # picked by a scheduler, being sent
        self._paid: dict[Task, Server] = {}  # who has paid the receive cost of a task
        self.outstanding = 0  # hybrid: tasks forwarded and not yet finished/dropped (the selector's accounting)
        self._rr = 0
        self._history = LoadHistory(self.nodes)  # each node's load over time (for cached views)
        self._blocked: dict[int, Server] = {}  # servers waiting for room to retry, by order
        self._holders: set[Server] = set()  # decentralized: servers with tasks in their pending queue
        self.retired: list[Server] = []  # the schedulers of the plans switched from (their counters)
        self.generation = 0  # plans switched to so far
        self._frozen = False  # a switch's pause: no scheduler works
        self._install(plan)
        # the ideal's scoring (the competitive ratio's): the first plan's, whatever plan is in force later
        self.ratio = RatioSampler(self.truth, self.scoring, self.gp, self.cluster.with_room, lambda: self.cluster.free,
                                  cr_every)
        self._ended_at = math.inf  # when the last task was resolved
        self.events = 0  # events run so far
        self.window = (warmup, max((t.arrival for t in self.tasks), default=0.0) + 1e-9)
        if self.window[0] >= self.window[1]:
            raise ValueError(f"warmup ({warmup} s) must end before the last arrival ({self.window[1]:.3f} s)")
        self.warm: set[Task] = set()
        if prefill and self.tasks:
            self._prefill(1.0 if prefill is True else float(prefill))
            self._history.reset()  # the prefilled loads are every view's first
        # arrivals are scheduled one at a time, each by the one before (ties in scenario order), and a
        # task's timeout when it arrives: a heap of what is due soon, not of the whole scenario
        self._arrivals = iter(sorted(self.tasks, key=_arrival))
        self._next_arrival()

    # ------------------------------------------------------------ building
    def _install(self, plan: LoweredPlan, state: Optional[dict] = None) -> None:
        """Make ``plan``'s schedulers and put it in force; each starts from ``state`` (None: the initial
        State). What a plan decides about -- its Score's split, its hooks' replication, its views, the
        homes of a decentralized plan's tasks -- is set here; the cluster, the clock, the truth and the
        metrics belong to the run."""
        n = len(self.nodes)
        self.plan, self.arch = plan, plan.architecture
        # plan.policy's Score: the centralized and decentralized schedulers' decisions
        self.scoring = scoring_for(plan.policy, plan.split, self._any_resources, self._key)
        self.hooks = HookRunner(plan, n, self._keys)
        self._views = plan.load.kind is LoadKind.CACHED
        task_key = (row_key(plan.task_policy.score, self._any_resources, cache=True, shared=self._keys)
                    if plan.task_policy is not None else None)
        self.central, self.locals = build_servers(plan, self.nodes, self.seed, self._key, self.scoring, task_key,
                                                  self._any_resources, self._history, state=state)
        if self.hooks.periodic:  # (every replica's first State)
            self.hooks.start_store(state if state is not None else Interpreter(plan.policy, num_nodes=n).state)
            self.locals.on_made = self._first_tick
        self._keeps_state = self.arch is not Architecture.HYBRID or plan.local_state
        # who retries when a slot frees (probe and sample views; a cached view learns of it at a heartbeat)
        self._wakes_on_room = plan.load.kind is not LoadKind.CACHED
        self._decentralized = self.arch is Architecture.DECENTRALIZED
        self._homes = assign_homes(self.tasks, len(self.locals)) if self._decentralized else {}

    def _prefill(self, level: float = 1.0) -> None:
        """Start from a busy cluster: slots hold copies of tasks of the scenario.

        ``level`` 1: every slot of every node (the steady state of an
        overloaded cluster); below 1, that share of the executors, spread over
        the nodes, and no queue (the steady state of a cluster executing that
        share of its execution bound -- a plan whose schedulers carry less
        than the nodes can run). Running copies have a residual duration drawn
        uniformly from their task's duration (the steady state of a busy
        executor), queued ones the full duration. They go through the
        policy's hooks like dispatched tasks (so DRF's allocations include
        them) and are left out of the metrics. A slot no task's resources fit into
        stays empty.
        """
        if level >= 1:
            slots = [(node, slot) for node in self.nodes for slot in range(node.executors + node.queue)]
        else:
            layers = max(n.executors for n in self.nodes)
            slots = [(node, slot) for slot in range(layers) for node in self.nodes if slot < node.executors]
            slots = slots[:int(round(level * len(slots)))]
        src = itertools.cycle(self.tasks)
        arch = self.arch
        i = 0
        full: set = set()  # nodes no task fits into any more (what a node holds only grows while it fills)
        for node, slot in slots:
            if node in full:
                continue
            t = next((t for t in itertools.islice(src, len(self.tasks)) if node.fits(t)), None)
            if t is None:
                full.add(node)
                continue
            d = t.spec.duration * (float(self.rng.uniform()) if slot < node.executors else 1.0)
            warm = Task(dataclasses.replace(t.spec, id=f"~warm{i}", arrival=0.0, duration=d, timeout=math.inf))
            i += 1
            self.warm.add(warm)
            self.cluster.dispatch(warm, node)
            self.hooks.run(self.truth, "OnDispatch", warm, node, self.loop.now)
            if arch is Architecture.DECENTRALIZED:
                owner = self.locals[self._homes[t]]
                self._run_hook(owner, "OnDispatch", warm, node)
            else:
                self._run_hook(self.central, "OnDispatch", warm, None if arch is Architecture.HYBRID else node)
                owner = self.central
                if arch is Architecture.HYBRID:
                    self.outstanding += 1
                    if self.plan.local_state:
                        owner = self.locals[i % len(self.locals)]
                        self._run_hook(owner, "OnDispatch", warm, node)
            self.owner[warm] = owner

    def _run_hook(self, s: Server, name: str, task: Task, node) -> None:
        """Run a hook on a scheduler's own State (a hybrid's placements keep none unless their node part reads it)."""
        if not self._keeps_state and s.role is Role.SCHEDULERS:
            return
        if s.role is Role.SCHEDULERS:
            self.hooks.run_replica(s.interp, s.unpushed, name, task, node, self.loop.now)
        else:
            self.hooks.run(s.interp, name, task, node, self.loop.now)

    # --------------------------------------------------------------- events
    def _next_arrival(self) -> None:
        task = next(self._arrivals, None)
        if task is not None:
            self.loop.at(task.arrival, ARRIVAL, self._arrive, task)

    def _arrive(self, task: Task) -> None:
        self._next_arrival()
        if math.isfinite(task.spec.timeout):
            self.loop.at(task.spec.deadline, TIMEOUT, self._timeout, task)
        if self._on_arrival:
            self.hooks.run(self.truth, "OnArrival", task, None, self.loop.now)
        self.gp.add(task)
        s = self.central if self.arch is not Architecture.DECENTRALIZED else self.locals[self._homes[task]]
        self._deliver(s, task)

    def _deliver(self, s: Server, task: Task, arrived: bool = True) -> None:
        """A task reaches a scheduler's pending queue (its receive cost is charged when it is decided);
        ``arrived`` False: handed over by a switch (its OnArrival is in the State handed over)."""
        if not s.ticking:
            self._rouse(s)
        s.received += 1
        s.pending.add(task)
        if self._decentralized:
            self._holders.add(s)
        self.where[task] = s
        if arrived and self._on_arrival and (s.role is Role.SELECTOR or self.arch is Architecture.DECENTRALIZED):
            self._run_hook(s, "OnArrival", task, None)
        self._kick(s)

    def _notify(self, s: Server, task: Task) -> None:
        """A finish notification reaches a scheduler's inbox."""
        if not s.ticking:
            self._rouse(s)
        s.inbox.append((_FINISH, task))
        self._kick(s)

    def _resolve(self) -> None:
        self.unresolved -= 1
        if self.unresolved <= 0:
            self._ended_at = self.loop.now

    def _recv_cost(self, s: Server, task: Task) -> float:
        if self._paid.get(task) is s:
            return 0.0
        self._paid[task] = s
        return s.costs.recv_s

    def _timeout(self, task: Task) -> None:
        if task.status == "pending":
            if self.deadline == "dispatch" and (task in self.claimed or task in self.forwarded):
                return  # a scheduler committed to it in time: it will be placed
            task.status = "dropped"
            self._resolve()
            self.gp.remove(task)
            s = self.where.pop(task, None)
            if s is not None:
                s.pending.remove(task)
                if not s.pending:
                    self._holders.discard(s)
            if task in self.forwarded:  # hybrid: the selector counted it and ran OnDispatch
                self._notify(self.central, task)
        elif task.status == "queued" and self.deadline == "start":
            self.cluster.drop(task)

    def _on_leave(self, task: Task) -> None:
        if self._views:
            self._history.record(task.node, self.loop.now)
        if task not in self.warm:
            self._resolve()
        self.hooks.run(self.truth, "OnFinish", task, task.node, self.loop.now)
        if self.arch is Architecture.DECENTRALIZED:
            self._notify(self.owner[task], task)
        else:
            self._notify(self.central, task)
            if self.arch is Architecture.HYBRID and self.plan.local_state:
                self._notify(self.owner[task], task)
        self._room_event()

    def _block(self, s: Server) -> None:
        """``s`` found no room: it waits (a probe or sample view retries when a slot frees)."""
        s.blocked = True
        if self._wakes_on_room and (s.role is Role.SCHEDULERS or self.arch is Architecture.CENTRALIZED):
            self._blocked[s.order] = s

    def _room_event(self) -> None:
        """A slot freed: schedulers that found no room (probe/sample views) try again."""
        for order in sorted(self._blocked):
            s = self._blocked[order]
            delay = float(s.rng.uniform(0.0, s.attempt_s))
            self.loop.after(delay, DECIDE, self._wake, s)

    def _wake(self, s: Server) -> None:
        if s.retired:
            return
        s.blocked = False
        self._blocked.pop(s.order, None)
        self._kick(s)

    # ------------------------------------------------- periodic State sync
    #
    # Each replica syncs every period, at its own phase. A replica with nothing
    # to push, nothing to decide and nothing in its inbox would only pull: its
    # rounds are then not simulated one by one (a thousand idle schedulers
    # would cost ten thousand events a second) -- it goes *dormant*, and when
    # something next reaches it, :meth:`_rouse` runs the rounds it skipped at
    # once: each kept it busy for a sync and left it with the store as of that
    # moment (:meth:`~ray_adaptive.sim.replication.HookRunner.store_at`), as if
    # they had been simulated.

    def _first_tick(self, s: Server) -> None:
        """A scheduler used for the first time: dormant since before its first round."""
        s.next_tick = float(s.rng.uniform(0, self.plan.sync.period_s))
        s.ticking = False

    def _sync_tick(self, s: Server) -> None:
        if self.unresolved <= 0 or s.retired:
            s.ticking = False
            return
        idle = not (s.busy or s.inbox or s.pending or s.unpushed or s.sync_queued)
        if idle:  # only a pull: dormant until something reaches it
            s.ticking = False
            return
        s.next_tick = self.loop.now + self.plan.sync.period_s
        if not s.sync_queued:  # one sync catches up everything: a tick while one waits or runs adds nothing
            s.sync_queued = True
            s.inbox.append((_SYNC, None))
            self._kick(s)
        self.loop.at(s.next_tick, ARRIVAL, self._sync_tick, s)

    def _rouse(self, s: Server) -> None:
        """Run the sync rounds a dormant scheduler skipped, up to now, and schedule its next."""
        if s.ticking or not self.hooks.periodic or s.role is not Role.SCHEDULERS:
            return
        now = self.loop.now
        period, t = self.plan.sync.period_s, s.next_tick
        while t <= now:
            w = s.work_time(s.costs.sync_s, t)
            s.busy_s += w
            if t + w > now:  # mid-sync now: it ends as a simulated one does
                s.busy = s.sync_queued = True
                self.loop.at(t + w, DECIDE, self._item_done, s, _SYNC, None)
            else:
                self.hooks.pull(s.interp, self.hooks.store_at(t + w))
            t = t + period
        s.next_tick = t
        s.ticking = True
        self.loop.at(t, ARRIVAL, self._sync_tick, s)

    def _skipped_busy(self, s: Server, until: float) -> float:
        """The busy time of the sync rounds a dormant scheduler skipped up to ``until``."""
        if not self.hooks.periodic or s.role is not Role.SCHEDULERS:
            return 0.0
        busy, t = 0.0, s.next_tick
        while t <= until:
            busy += s.work_time(s.costs.sync_s, t)
            t = t + self.plan.sync.period_s
        return busy

    # ----------------------------------------------------------- scheduling
    def _kick(self, s: Server) -> None:
        if not s.busy:
            self._step(s)

    def _busy(self, s: Server, cost: float, fn, *args) -> None:
        cost = s.work_time(cost, self.loop.now)
        s.busy = True
        s.busy_s += cost
        self.loop.after(cost, DECIDE, fn, s, *args)

    def _step(self, s: Server) -> None:
        if self._frozen or s.retired:  # a switch's pause; a retired server's last work ended
            return
        if s.inbox:
            kind, payload = s.inbox.popleft()
            cost = s.costs.finish_s if kind == _FINISH else s.costs.sync_s
            self._busy(s, cost, self._item_done, kind, payload)
            return
        if not s.pending or s.blocked:
            return
        if s.role is Role.SELECTOR and self.arch is Architecture.HYBRID:
            self._select(s)
        else:
            self._attempt(s)

    def _item_done(self, s: Server, kind: str, payload) -> None:
        s.busy = False
        if s.retired:  # (the State it updated was handed over without it: the truth's has it)
            return
        if kind == _FINISH:
            task = payload
            if s.role is Role.SELECTOR and self.arch is Architecture.HYBRID:
                self.forwarded.pop(task, None)
                self.outstanding -= 1
                s.blocked = False
                self._run_hook(s, "OnFinish", task, None)
            elif task.node is not None:
                self._run_hook(s, "OnFinish", task, task.node)
        elif kind == _SYNC:
            s.sync_queued = False
            self.hooks.push_pull(s.interp, s.unpushed, self.loop.now)
        self._step(s)

    # hybrid selector ------------------------------------------------------
    def _select(self, s: Server) -> None:
        if self.outstanding >= self.total_slots:
            s.blocked = True
            return
        s.attempts += 1
        pick = s.core.pick(self.nodes[:1], self.loop.now)
        if pick is None:
            s.failed += 1
            s.blocked = True
            return
        task = pick[0]
        self.where.pop(task, None)
        self.claimed.add(task)
        self._busy(s, s.costs.compute_s + self._recv_cost(s, task) + s.costs.send_s, self._forward_done, task,
                   self.loop.now)

    def _forward_done(self, s: Server, task: Task, decided_at: float) -> None:
        s.busy = False
        if s.retired:  # a decision not in effect when the plan was switched: undone (the task was handed over)
            return
        self.claimed.discard(task)
        if task.status == "pending":
            s.decisions += 1
            self.outstanding += 1
            self.forwarded[task] = decided_at
            self._run_hook(s, "OnDispatch", task, None)
            target = self.locals[self._rr % len(self.locals)]
            self._rr += 1
            self._deliver(target, task)
        self._step(s)

    # decision attempt (centralized, decentralized, placement schedulers) ---
    def _with_room(self) -> NodeSet:
        return self.cluster.with_room()

    def _attempt(self, s: Server) -> None:
        s.attempts += 1
        now = self.loop.now
        cost = s.attempt_s
        pick = s.core.pick(s.candidates(self.plan, self.nodes, self._with_room, now), now)
        if self._decentralized and not s.pending:
            self._holders.discard(s)
        if pick is None:
            s.failed += 1
            self._block(s)
            if s.view is not None:  # learn of room at the next heartbeat
                nxt = s.view.next_round(now)
                if s.wake_at < nxt:
                    s.wake_at = nxt
                    self.loop.at(nxt, ARRIVAL, self._wake, s)
            self._busy(s, cost, self._attempt_failed)
            return
        task, view = pick
        self.where.pop(task, None)
        self.claimed.add(task)
        node = view.node if isinstance(view, ViewNode) else view
        self._busy(s, cost + self._recv_cost(s, task) + s.costs.send_s, self._dispatch_done, task, node, now)

    def _attempt_failed(self, s: Server) -> None:
        s.busy = False
        self._step(s)  # (a no-op for a retired one)

    def _dispatch_done(self, s: Server, task: Task, node: Node, decided_at: float) -> None:
        s.busy = False
        if s.retired:  # a decision not in effect when the plan was switched: undone (the task was handed over)
            return
        self.claimed.discard(task)
        if task.status == "pending":
            if node.has_room and node.fits(task):
                self._dispatch(s, task, node, decided_at)
            else:
                s.bounces += 1
                if self.deadline == "dispatch" and task not in self.forwarded and self.loop.now >= task.spec.deadline:
                    self._timeout(task)  # refused after its deadline: dropped
                else:
                    s.pending.add(task)
                    if self._decentralized:
                        self._holders.add(s)
                    self.where[task] = s
        self._step(s)

    def _dispatch(self, s: Server, task: Task, node: Node, decided_at: float) -> None:
        now = self.loop.now
        sample = (self.ratio.sample(task, node, self.forwarded.get(task, decided_at), now, self._deciders(s))
                  if self.record_cr and now >= self.cr_from else None)
        self.cluster.dispatch(task, node)
        if self._views:
            self._history.record(node, now)
        self.gp.remove(task)
        self.forwarded.pop(task, None)
        s.decisions += 1
        self.owner[task] = s
        self.placed_by[task.id] = s.name
        self.hooks.run(self.truth, "OnDispatch", task, node, now)
        if self.arch is not Architecture.HYBRID or self.plan.local_state:
            self._run_hook(s, "OnDispatch", task, node)
        if s.view is not None:
            s.view.dispatched(node, now)
        if sample is not None:
            self.ratio.record(sample, now)
            if self.settle is not None and len(self.ratio) % self.settle.batch == 0:
                self._maybe_stop()

    def _deciders(self, s: Server) -> int:
        """How many decisions the plan is making at once, as ``s`` makes one: its schedulers holding
        tasks (decentralized), or its one task-picking scheduler."""
        if self.arch is not Architecture.DECENTRALIZED:
            return 1
        return len(self._holders) + (0 if s in self._holders else 1)

    def _maybe_stop(self) -> None:
        """End the run here if the competitive ratio is settled above the limit; the metrics' window ends
        here too."""
        if self.settle.done(self.ratio.impl, self.ratio.ideal, self.ratio.times):
            self.stopped_at = self.loop.now
            self.window = (self.window[0], max(min(self.window[1], self.loop.now), self.window[0] + 1e-9))
            self.loop.stop()

    # ------------------------------------------------------------------ run
    def servers(self) -> list[Server]:
        """The plan in force's selector (if any) and the schedulers it used so far."""
        return ([self.central] if self.central else []) + self.locals.made()

    # ---------------------------------------------------------- live switch
    def switch(self, plan: LoweredPlan, now: float, pause_s: float = 0.0) -> dict:
        """Hand the run over to ``plan``'s schedulers at ``now`` (the time the run was advanced to), as
        the runtime's live switch does (:mod:`ray_adaptive.runtime.switch`): nothing lost, nothing run
        twice. Returns what was handed over.

        * **Freeze and retire.** The schedulers in force stop; what they hold -- a decision not yet in
          effect (picked and being sent, or forwarded by a hybrid's selector and not placed), finish
          notifications and syncs not yet applied -- is dropped with them: the runtime undoes such a
          decision, and the State handed over already counts the rest.
        * **The State.** Every new scheduler starts from the exact State -- the truth's: the OnArrival of
          every undecided task, the OnDispatch of every task on a node, the OnFinish of every task gone.
        * **The tasks.** Undecided ones go, in arrival order, to their scheduler under the new plan (no
          second OnArrival); one whose dispatch deadline passed while a decision on it was in flight is
          dropped now. Tasks on nodes keep running; their finish notifications go to the new plan's
          schedulers (OnFinish applied to the State that counts them); a hybrid's selector counts them
          as outstanding.
        * **The pause.** No scheduler works for ``pause_s``: arrivals and finishes wait in inboxes.

        The cluster, the clock, deadlines, the truth and the metrics go on: one run, several plans.
        """
        if plan.policy.name != self.plan.policy.name:
            raise ValueError(f"a run of policy {self.plan.policy.name!r} cannot switch to a plan of "
                             f"{plan.policy.name!r}")
        overloaded = periodic_overload(plan)
        if overloaded:
            raise ValueError(f"plan {plan.name!r} cannot run: {overloaded}")
        if isinstance(pause_s, bool) or not (isinstance(pause_s, (int, float)) and 0 <= pause_s < math.inf):
            raise ValueError(f"pause_s must be a number of seconds >= 0, got {pause_s!r}")
        if now < self.loop.now or self.loop.peek() < now:
            raise ValueError(f"switch at {now} s: the run is at {self.loop.now} s with events due before; "
                             f"advance it to {now} s first")
        self.loop.now = now
        old, before = self.servers(), self.plan.name
        self.generation += 1
        for s in old:
            s.retired = True
            s.name = f"{s.name}@{self.generation - 1}"  # (its counters stay in the run's, beside the new ones')
        self.retired += old
        undecided = self.gp.tasks()
        self.where.clear(), self.claimed.clear(), self.forwarded.clear(), self._paid.clear()
        self._blocked.clear(), self._holders.clear()
        recorded = self._views
        self._install(plan, copy_state(self.truth.state))
        if self._views and not recorded:  # (loads were not logged under a plan without cached views)
            self._history.reset()
        on_nodes = [t for node in self.nodes for t in (*node.running, *node.waiting)]
        self.outstanding = len(on_nodes)  # (a hybrid selector's accounting: each will notify it)
        for i, t in enumerate(on_nodes):
            self.owner[t] = self._owner_after_switch(t, i)
        dropped = 0
        for t in sorted(undecided, key=lambda x: (x.arrival, x.id)):
            if self.deadline == "dispatch" and now >= t.spec.deadline:
                self._timeout(t)
                dropped += 1
            else:
                entry = self.locals[self._homes[t]] if self._decentralized else self.central
                self._deliver(entry, t, arrived=False)
        self._frozen = pause_s > 0
        if self._frozen:
            self.loop.at(now + pause_s, DECIDE, self._resume, self.generation)
        else:
            self._resume(self.generation)
        return {"time": now, "from": before, "to": plan.name, "pause_s": pause_s, "undecided": len(undecided) - dropped,
                "on_nodes": len(on_nodes), "dropped": dropped}

    def _owner_after_switch(self, task: Task, i: int) -> Server:
        """Who a task on a node notifies of its finish under the plan just installed."""
        if self._decentralized:
            return self.locals[self._homes.get(task, i % len(self.locals))]  # (a prefilled copy has no home)
        if self.arch is Architecture.HYBRID and self.plan.local_state:
            return self.locals[i % len(self.locals)]  # (the selector is notified too: see _on_leave)
        return self.central

    def _resume(self, generation: int) -> None:
        """A switch's pause is over: the new plan's schedulers start on what waited."""
        if generation != self.generation:  # (a later switch's pause is in force)
            return
        self._frozen = False
        for s in self.servers():
            self._kick(s)

    def advance(self, until: float) -> int:
        """Run the events up to ``until`` (simulated seconds); how many ran. A run may be advanced in
        steps -- an epoch at a time, with something looking at it in between -- and then finished by
        :meth:`run`."""
        with np.errstate(all="ignore"):  # as in the interpreter: inf and NaN scores are values (split scoring combines parts)
            n = self.loop.run(until)
        self.events += n
        return n

    def run(self, until: float = math.inf) -> SimResult:
        """Run to the end (every task resolved), or to ``until`` (simulated seconds; the metrics' window
        ends there too)."""
        if until < self.window[1]:
            self.window = (self.window[0], max(until, self.window[0] + 1e-9))
        self.advance(until)
        return self.result()

    def result(self) -> SimResult:
        """What the run did so far."""
        servers = self.servers()
        end = min(self._ended_at, self.loop.now) - 1e-12
        # (the rounds dormant schedulers skipped so far: their busy time)
        stats = [s.stats(extra_busy=0.0 if s.ticking else self._skipped_busy(s, end)) for s in servers]
        stats += [s.stats() for s in self.retired]  # (a plan switched from: what its schedulers did before)
        return SimResult(self.plan, self.tasks, stats, np.array(self.ratio.impl), np.array(self.ratio.ideal),
                         self.window, self.placed_by, self.events, np.array(self.ratio.times))


def periodic_overload(plan: LoweredPlan) -> str:
    """Why ``plan``'s schedulers could never finish a task -- their heartbeat rounds alone take longer than
    the period -- or "" if they can."""
    if plan.load.kind is not LoadKind.CACHED:
        return ""
    worst = max(plan.central.heartbeat_s, plan.local.heartbeat_s)
    if worst >= plan.load.period_s:
        return (f"a heartbeat round (every node's load report) keeps a scheduler busy {worst * 1e3:.3g} ms, "
                f"longer than the {plan.load.period_s * 1e3:.3g} ms period")
    return ""


def simulate(plan: LoweredPlan, scenario: Scenario, seed: int = 0, warmup: float = 0.0, record_cr: bool = True,
             cr_every: int = 1, deadline: str = "dispatch", prefill: "bool | float" = False, cr_from: float = 0.0,
             source: str = "<scenario>", settle: Optional[M.Settle] = None, validate: bool = True,
             until: float = math.inf) -> SimResult:
    """Run ``plan`` on ``scenario`` and return the result (deterministic for a seed).

    ``warmup``: seconds at the start left out of the metrics. ``cr_every``:
    sample the competitive ratio at every n-th decision. ``deadline``: what
    a task's timeout bounds, its ``dispatch`` (default here: no work is
    wasted under overload) or its ``start`` (the replay's default); see
    :mod:`ray_adaptive.sim.model`. ``prefill``: start with every node slot
    busy (True: the steady state of an overloaded cluster), or that share of
    the executors (a number below 1), see :meth:`PlanSim._prefill`.
    ``cr_from``: sample the competitive ratio only from this time on.
    ``settle``: stop as soon as the competitive ratio is settled above the
    limit (see :class:`~ray_adaptive.sim.metrics.Settle`; the compiler's replays).
    ``validate``: check the tasks' fields against the policy first (the
    compiler checked its window once, for every plan's replay). ``until``: stop
    there (simulated seconds) rather than when every task is resolved.
    """
    with gc_paused():
        return PlanSim(plan, scenario, seed=seed, warmup=warmup, record_cr=record_cr, cr_every=cr_every,
                       deadline=deadline, prefill=prefill, cr_from=cr_from, source=source, settle=settle,
                       validate=validate).run(until)
