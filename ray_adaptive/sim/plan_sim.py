"""Simulate an implementation plan on the cluster model.

The same nodes, queues, timeouts and event order as the ideal replay
(:mod:`ray_adaptive.sim.cluster`, :mod:`ray_adaptive.sim.events`), with
schedulers that take time and see only part of the truth:

* **Schedulers are single-threaded servers.** Each has an inbox (finish
  notifications, heartbeat rounds, state syncs), served first-come
  first-served, and makes decisions when its inbox is empty. Every item and
  every decision attempt keeps it busy for the plan's
  :class:`~ray_adaptive.sim.plans.RoleCosts` -- exactly the latencies the
  compiler estimates, so estimated throughput and simulated goodput agree
  where a scheduler is the bottleneck. A task joins a scheduler's pending
  queue on arrival; its receive cost is charged with the decision that sends
  it on (an overloaded scheduler does not spend itself reading submissions
  that will time out -- no receive livelock).
* **A decision** is taken on what the scheduler sees when it starts: its own
  pending queue, its replica of State, loads per its
  :class:`~ray_adaptive.sim.plans.LoadView`. The task is sent when the
  attempt ends; if the node has filled up meanwhile (another scheduler took
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

Deterministic for a seed.

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> from ray_adaptive.sim.plans import RoleCosts, SimPlan
    >>> from ray_adaptive.sim.scenario import scenario_from_dict
    >>> from ray_adaptive.sim.workload import paper_workload
    >>> plan = SimPlan("centralized", "centralized", load_policy("drf_lb"),
    ...                central=RoleCosts(recv_s=7e-4, send_s=7e-4, finish_s=7e-4, probe_s=3.5e-5))
    >>> r = simulate(plan, scenario_from_dict(paper_workload(300, seconds=1.0)))
    >>> r.metrics().goodput > 250
    True
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ray_adaptive.dsl import ir
from ray_adaptive.dsl.interp import Interpreter
from ray_adaptive.sim import metrics as M
from ray_adaptive.sim.cluster import Cluster
from ray_adaptive.sim.events import ARRIVAL, DECIDE, TIMEOUT, EventLoop, gc_paused
from ray_adaptive.sim.model import DEADLINES, Node, Task
from ray_adaptive.sim.plans import RoleCosts, SimPlan
from ray_adaptive.sim.replicas import merge_into
from ray_adaptive.sim.scenario import Scenario, check_fields
from ray_adaptive.sim.scoring import group_key, scoring_for

__all__ = ["simulate", "PlanSim", "SimResult", "SchedulerStats", "Metrics"]

_FINISH, _SYNC = "finish", "sync"


def _arrival(task: Task) -> float:
    return task.arrival


class _ViewNode:
    """A node as a scheduler with cached loads sees it (the interpreter's NodeView)."""

    __slots__ = ("node", "id", "index", "executors", "queue", "slots", "resources", "fields", "load")

    def __init__(self, node: Node):
        self.node = node
        self.id, self.index, self.executors, self.queue = node.id, node.index, node.executors, node.queue
        self.slots = node.slots
        self.resources, self.fields, self.load = node.resources, node.fields, 0

    @property
    def available(self) -> dict:
        return self.node.available

    def fits(self, task: Task) -> bool:
        return self.node.fits(task)


def _cached(key):
    """``key`` computed once per task."""
    if key is None:
        return None
    cache: dict = {}

    def get(t: Task):
        k = cache.get(t)
        if k is None:
            k = cache[t] = key(t)
        return k

    return get


def _itself(x):
    return x


def _row_key(fn, resources: bool, shared: Optional[dict] = None):
    """A function giving tasks that Score ``fn`` (and the resource fit) cannot tell apart the same key.

    None when every task differs (Score reads ``task.id``). Computed once per task, and once for
    all the functions that read the same task attributes when they share a ``shared`` dict.
    """
    if shared is None:
        return _cached(_row_key_uncached(fn, resources))
    what = (ir.task_attributes_read(fn), resources)
    if what not in shared:
        shared[what] = _cached(_row_key_uncached(fn, resources))
    return shared[what]


def _row_key_uncached(fn, resources: bool):
    key = group_key(fn)
    if key is None or not resources:
        return key
    return lambda t: (*key(t), tuple(sorted(t.spec.resources.items())))


class _Queue:
    """Pending tasks grouped by what Score reads of them, each group ordered by (arrival, id).

    Tasks of one group score the same against every node, so a decision
    need only score each group's first task (its *head*): with heads ordered
    by (arrival, id), the first minimum among them is the first minimum over
    all tasks -- the tie rule. ``key`` None: every task is its own group.
    """

    def __init__(self, key):
        self._k = key if key is not None else _itself  # a task's group
        self.groups: dict = {}  # key -> ([(arrival, id)], [Task])
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def add(self, task: Task) -> None:
        keys, tasks = self.groups.setdefault(self._k(task), ([], []))
        k = (task.arrival, task.id)
        i = bisect.bisect_right(keys, k)
        keys.insert(i, k)
        tasks.insert(i, task)
        self.n += 1

    def remove(self, task: Task) -> bool:
        g = self._k(task)
        entry = self.groups.get(g)
        if entry is None:
            return False
        keys, tasks = entry
        i = bisect.bisect_left(keys, (task.arrival, task.id))
        if i < len(tasks) and tasks[i] is task:
            del keys[i], tasks[i]
            if not tasks:
                del self.groups[g]
            self.n -= 1
            return True
        return False

    def heads(self, upto: float = math.inf) -> list[Task]:
        """First task of every group (that had arrived by ``upto``), in (arrival, id) order."""
        hs = [tasks[0] for keys, tasks in self.groups.values() if keys[0][0] <= upto]
        hs.sort(key=lambda t: (t.arrival, t.id))
        return hs

    def count(self, head: Task, upto: float = math.inf) -> int:
        """Tasks in ``head``'s group that had arrived by ``upto``."""
        keys, _ = self.groups[self._k(head)]
        return len(keys) if upto == math.inf else bisect.bisect_right(keys, (upto, "\U0010ffff"))


class _Sched:
    """One scheduler instance: inbox, pending queue, State (an interpreter), view, counters."""

    def __init__(self, name: str, role: str, costs: RoleCosts, interp: Optional[Interpreter], rng, key, fifo: bool,
                 scoring):
        self.name, self.role, self.costs, self.interp, self.rng = name, role, costs, interp, rng
        self.scoring = scoring  # how it scores with its interpreter's policy (see ray_adaptive.sim.scoring)
        self.fifo = fifo  # a hybrid placement scheduler serves forwarded tasks in order
        self.pending = [] if fifo else _Queue(key)
        self.inbox: deque = deque()
        self.busy = False
        self.blocked = False
        self.busy_s = 0.0
        self.received = self.attempts = self.failed = self.bounces = self.decisions = 0
        self.view: Optional[list[_ViewNode]] = None  # cached loads (as of view_tick, plus own dispatches since)
        self.view_tick = -math.inf
        self.view_next = -math.inf  # the first heartbeat round after the view was last brought up to date
        self.attempt_s = 0.0  # busy time of one decision attempt
        self.hb_index = 0
        self.own: list[tuple[float, int]] = []  # own dispatches: (time, node index)
        self.wake_at = -math.inf
        self.unpushed: dict = {}
        self.sync_queued = False  # a periodic sync waits in the inbox or runs

    def add(self, task: Task) -> None:
        if self.fifo:
            self.pending.append(task)
        else:
            self.pending.add(task)

    def remove(self, task: Task) -> bool:
        if not self.fifo:
            return self.pending.remove(task)
        try:
            self.pending.remove(task)
            return True
        except ValueError:
            return False


@dataclass(frozen=True)
class SchedulerStats:
    """What one scheduler did: busy time, messages received, decision attempts and their outcomes."""

    name: str
    role: str  # "selector" | "scheduler"
    busy_s: float
    received: int
    attempts: int
    failed: int  # attempts that found no node with room in the scheduler's view
    bounces: int  # decisions refused by a node that had filled up meanwhile
    decisions: int  # tasks sent (dispatched, or forwarded by the hybrid's selector)


@dataclass(frozen=True)
class Metrics:
    """A run's figures over the measurement window (warm-up to the last arrival).

    ``goodput``: tasks completed inside the window / its length. The
    overload control admits a task when it starts before its deadline
    (``arrival + timeout``) and drops it otherwise; an admitted task runs to
    completion and counts. (``on_time`` counts only tasks that also
    *finished* by the deadline: under sustained overload a FIFO-within-tenant
    backlog is always nearly a timeout old, so its tasks start just in time
    and finish just late, and that figure collapses for every scheduler, the
    ideal one included -- see the README.)
    ``offered``, ``dropped``, ``late``, ``tasks``: of the tasks that arrived
    inside it. ``service``: per tenant,
    on-time goodput / its max-min fair share of the total goodput (demands =
    offered rates); ``jfi``: Jain's index over the service ratios.
    ``response_p50/p99``: arrival to finish of completed tasks; ``wait_p50/p99``:
    arrival to dispatch. ``utilisation``: busy fraction of the selector
    (centralized, hybrid) and the busiest decentralized scheduler.
    ``cr``: the competitive ratio summary (:func:`~ray_adaptive.sim.metrics.competitive_ratio`).
    """

    offered: float
    goodput: float
    on_time: float
    dropped: int
    late: int
    tasks: int
    service: dict
    jfi: float
    response_p50: float
    response_p99: float
    wait_p50: float
    wait_p99: float
    utilisation: dict
    bounces: int
    cr: dict

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class SimResult:
    """The outcome of :func:`simulate`: every task, every scheduler, the competitive-ratio samples."""

    plan: SimPlan
    tasks: list[Task]
    schedulers: list[SchedulerStats]
    cr_impl: np.ndarray
    cr_ideal: np.ndarray
    window: tuple[float, float]
    placed_by: dict = field(default_factory=dict, repr=False)  # task id -> scheduler name
    events: int = 0

    def metrics(self, tenant_field: str = "tenant", cr_scale: Optional[float] = None) -> Metrics:
        """Goodput, drops, fairness, latency, utilisation and competitive ratio over the window."""
        lo, hi = self.window
        span = hi - lo
        inside = [t for t in self.tasks if lo <= t.arrival < hi]
        # goodput: completions inside the window (a backlog drained after the last
        # arrival does not count); demand: arrivals inside the window
        done = [t for t in self.tasks if t.status == "finished" and lo <= t.finished_at < hi]
        on_time = [t for t in done if t.on_time]
        tenant = (lambda t: t.fields.get(tenant_field, "")) if tenant_field else (lambda t: "")
        demand: dict[str, float] = {}
        served: dict[str, float] = {}
        for t in inside:
            demand[tenant(t)] = demand.get(tenant(t), 0.0) + 1.0 / span
        for t in done:
            served[tenant(t)] = served.get(tenant(t), 0.0) + 1.0 / span
        goodput = len(done) / span if span > 0 else 0.0
        ratios = M.service_ratios(served, demand, goodput)
        resp = np.array([t.finished_at - t.arrival for t in done]) if done else np.zeros(1)
        waits = np.array([t.dispatched_at - t.arrival for t in inside if t.dispatched_at is not None])
        waits = waits if waits.size else np.zeros(1)
        sel = [s for s in self.schedulers if s.role == "selector"]
        loc = [s for s in self.schedulers if s.role == "scheduler"]
        end = max(hi, max((t.finished_at or 0.0 for t in self.tasks), default=hi))
        util = {}
        if sel:
            util["selector"] = round(sel[0].busy_s / end, 4) if end > 0 else 0.0
        if loc:
            util["schedulers_max"] = round(max(s.busy_s for s in loc) / end, 4) if end > 0 else 0.0
            util["schedulers_mean"] = round(sum(s.busy_s for s in loc) / len(loc) / end, 4) if end > 0 else 0.0
        return Metrics(
            offered=round(len(inside) / span, 3) if span > 0 else 0.0,
            goodput=round(goodput, 3),
            on_time=round(len(on_time) / span, 3) if span > 0 else 0.0,
            dropped=sum(t.status == "dropped" for t in inside),
            late=sum(t.status == "finished" and not t.on_time for t in inside),
            tasks=len(inside),
            service={k: round(v, 4) for k, v in sorted(ratios.items())},
            jfi=round(M.jain_index(list(ratios.values())), 4),
            response_p50=round(float(np.percentile(resp, 50)), 6),
            response_p99=round(float(np.percentile(resp, 99)), 6),
            wait_p50=round(float(np.percentile(waits, 50)), 6),
            wait_p99=round(float(np.percentile(waits, 99)), 6),
            utilisation=util,
            bounces=sum(s.bounces for s in self.schedulers),
            cr=M.competitive_ratio(self.cr_impl, self.cr_ideal, scale=cr_scale),
        )


class PlanSim:
    """One run of ``plan`` on ``scenario`` (see the module docstring for the model)."""

    def __init__(self, plan: SimPlan, scenario: Scenario, seed: int = 0, warmup: float = 0.0,
                 record_cr: bool = True, cr_every: int = 1, deadline: str = "dispatch", prefill: bool = False,
                 cr_from: float = 0.0, source: str = "<scenario>", settle: Optional[M.Settle] = None,
                 validate: bool = True):
        if validate:
            check_fields(plan.policy, scenario, source)
        if deadline not in DEADLINES:
            raise ValueError(f"deadline must be one of {', '.join(DEADLINES)}, found {deadline!r}")
        self.deadline = deadline
        if cr_every < 1:
            raise ValueError(f"cr_every must be >= 1, found {cr_every}")
        self.plan = plan
        self.loop = EventLoop()
        self.cluster = Cluster(scenario.nodes, self.loop, self._on_leave)
        self.nodes = self.cluster.nodes
        n = len(self.nodes)
        self.total_slots = sum(x.executors + x.queue for x in self.nodes)
        self.tasks = [Task(spec) for spec in scenario.tasks]
        self._any_resources = any(t.spec.resources for t in self.tasks)
        self.rng = np.random.default_rng(seed)
        self.record_cr, self.cr_every, self._cr_count, self.cr_from = record_cr, cr_every, 0, cr_from
        self.settle, self.stopped_at = settle, None
        self.cr_impl: list[float] = []
        self.cr_ideal: list[float] = []
        self.truth = Interpreter(plan.policy, num_nodes=n)
        keys: dict = {}  # task -> group key, per set of task attributes read
        self._key = _row_key(plan.policy.score, self._any_resources, keys)
        # plan.policy's Score: the truth's, and the centralized and decentralized schedulers' decisions
        self.scoring = scoring_for(plan.policy, plan.split, self._any_resources, self._key)
        self._task_key = _row_key(plan.task_policy.score, self._any_resources, keys) if plan.task_policy is not None else None
        self.gp = _Queue(self._key)  # every task arrived, not yet dispatched nor dropped
        self.merge = dict(plan.merge)
        self.dynamic = tuple(self.merge)
        hooks = {h.name: h for h in plan.policy.hooks}
        self._hook_keys = {name: _row_key(hooks[name], False, keys) for name in plan.delta_hooks if name in hooks}
        self._hook_keys = {k: f for k, f in self._hook_keys.items() if f is not None}
        self._deltas: dict = {}  # (hook, kind of task) -> delta
        self._task_deltas: dict = {name: {} for name in self._hook_keys}  # hook -> task -> delta
        self.placed_by: dict[str, str] = {}
        self.owner: dict[Task, _Sched] = {}  # scheduler that dispatched the task (gets its finish notification)
        self.where: dict[Task, _Sched] = {}  # scheduler holding the task in its pending queue
        self.forwarded: dict[Task, float] = {}  # hybrid: selector's decision time
        self.unresolved = len(self.tasks)
        self.store: dict = {}
        self.claimed: set[Task] = set()  # picked by a scheduler, being sent
        self._paid: dict[Task, _Sched] = {}
        self._hb: list = []  # schedulers with a cached load view
        self._hb_seed = seed  # who has paid the receive cost of a task
        self.outstanding = 0  # hybrid: tasks forwarded and not yet finished/dropped (the selector's accounting)
        self._rr = 0
        self._build_schedulers(seed)
        arrivals = self.tasks
        self.window = (warmup, max((t.arrival for t in arrivals), default=0.0) + 1e-9)
        if self.window[0] >= self.window[1]:
            raise ValueError(f"warmup ({warmup} s) must end before the last arrival ({self.window[1]:.3f} s)")
        self._homes = self._assign_homes()
        self.warm: set[Task] = set()
        if prefill and self.tasks:
            self._prefill()
        self._hist = [([0.0], [x.load]) for x in self.nodes]  # each node's load over time (for cached views)
        # arrivals are scheduled one at a time, each by the one before (ties in scenario order), and a
        # task's timeout when it arrives: a heap of what is due soon, not of the whole scenario
        self._arrivals = iter(sorted(self.tasks, key=_arrival))
        self._next_arrival()
        for s in self.locals if plan.architecture != "centralized" else [self.central]:
            if plan.load.kind == "cached" and (plan.architecture != "hybrid" or s.role == "scheduler"):
                s.hb_index = len(self._hb)
                self._hb.append(s)
            if plan.sync.kind == "periodic" and s.role == "scheduler" and self.dynamic:
                self.loop.at(float(s.rng.uniform(0, plan.sync.period_s)), ARRIVAL, self._sync_tick, s)

    # ------------------------------------------------------------ building
    def _build_schedulers(self, seed: int) -> None:
        plan, n = self.plan, len(self.nodes)
        arch = plan.architecture
        seeds = itertools.count(1)

        def rng():
            return np.random.default_rng([seed, next(seeds)])

        self.central: Optional[_Sched] = None
        self.locals: list[_Sched] = []
        if arch == "centralized":
            self.central = _Sched("selector", "selector", plan.central, Interpreter(plan.policy, num_nodes=n), rng(),
                                  self._key, False, self.scoring)
        elif arch == "hybrid":  # the selector picks by the task part alone: no node, no resource fit
            self.central = _Sched("selector", "selector", plan.central, Interpreter(plan.task_policy, num_nodes=n), rng(),
                                  self._task_key, False, scoring_for(plan.task_policy, plan.task_split, False, self._task_key))
        if arch in ("decentralized", "hybrid"):
            k = plan.k(n)
            shared = None
            scoring = self.scoring if arch == "decentralized" else scoring_for(plan.node_policy, plan.node_split,
                                                                                self._any_resources)
            for i in range(k):
                if arch == "decentralized":
                    it = Interpreter(plan.policy, num_nodes=n)
                else:
                    it = Interpreter(plan.node_policy, num_nodes=n)
                if plan.sync.kind == "instant":
                    if shared is None:
                        shared = it.state
                    it.state = shared
                s = _Sched(f"s{i}", "scheduler", plan.local, it, rng(), self._key, arch == "hybrid", scoring)
                self.locals.append(s)
            if plan.sync.kind == "periodic" and self.locals:
                self.store = self._copy_state(self.locals[0].interp.state)
        self._keeps_state = arch != "hybrid" or plan.local_state
        self._all = ([self.central] if self.central else []) + self.locals
        for s in self._all:  # the busy time of one decision attempt
            s.attempt_s = s.costs.compute_s + s.costs.probe_s * plan.load.probes(n)
        # who retries when a slot frees (probe and sample views; a cached view learns of it at a heartbeat)
        self._wakeable = [s for s in self._all if s.role == "scheduler" or arch == "centralized"] \
            if plan.load.kind != "cached" else []
        if plan.load.kind == "cached":
            for s in self._all:
                if arch == "hybrid" and s.role == "selector":
                    continue
                s.view = [_ViewNode(x) for x in self.nodes]

    def _assign_homes(self) -> dict:
        if self.plan.architecture != "decentralized":
            return {}
        k = len(self.locals)
        homes: dict[str, int] = {}
        out = {}
        rr = 0
        for t in sorted(self.tasks, key=lambda x: (x.arrival, x.id)):
            sub = t.spec.submitter
            if sub:
                if sub not in homes:
                    homes[sub] = len(homes) % k
                out[t] = homes[sub]
            else:
                out[t] = rr % k
                rr += 1
        return out

    def _prefill(self) -> None:
        """Start from a saturated cluster: every slot of every node holds a copy of a task of the scenario.

        Running copies have a residual duration drawn uniformly from their
        task's duration (the steady state of a busy executor), queued ones the
        full duration. They go through the policy's hooks like dispatched
        tasks (so DRF's allocations include them) and are left out of the
        metrics.
        """
        src = itertools.cycle(self.tasks)
        arch = self.plan.architecture
        i = 0
        for node in self.nodes:
            for slot in range(node.executors + node.queue):
                t = next(src)
                d = t.spec.duration * (float(self.rng.uniform()) if slot < node.executors else 1.0)
                warm = Task(dataclasses.replace(t.spec, id=f"~warm{i}", arrival=0.0, duration=d, timeout=math.inf))
                i += 1
                self.warm.add(warm)
                self.cluster.dispatch(warm, node)
                self._hook(self.truth, "OnDispatch", warm, node)
                if arch == "decentralized":
                    owner = self.locals[self._homes[t]]
                    self._run_hook(owner, "OnDispatch", warm, node)
                else:
                    self._run_hook(self.central, "OnDispatch", warm, None if arch == "hybrid" else node)
                    owner = self.central
                    if arch == "hybrid":
                        self.outstanding += 1
                        if self.plan.local_state:
                            owner = self.locals[i % len(self.locals)]
                            self._run_hook(owner, "OnDispatch", warm, node)
                self.owner[warm] = owner

    # ---------------------------------------------------------------- state
    def _copy_state(self, state: dict) -> dict:
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in state.items()}

    def _delta(self, name: str, task: Task) -> dict:
        """The State change of delta hook ``name`` for ``task``: computed once per kind of task
        (and looked up once per task: the truth and the schedulers apply it too)."""
        d = self._task_deltas[name].get(task)
        if d is None:
            d = self._task_deltas[name][task] = self._kind_delta(name, task)
        return d

    def _kind_delta(self, name: str, task: Task) -> dict:
        key = (name, self._hook_keys[name](task))
        d = self._deltas.get(key)
        if d is None:
            scratch = Interpreter(self.plan.policy, num_nodes=len(self.nodes))
            before = self._copy_state(scratch.state)
            scratch.run_hook(name, task, None, 0.0)
            d = {}
            for v in self.merge:
                old, new = before[v], scratch.state[v]
                if isinstance(new, dict):
                    changed = {k: x for k, x in new.items() if old.get(k) is not x}
                    if changed:
                        d[v] = {k: (x - old[k] if k in old else x) for k, x in changed.items()}
                elif new is not old:
                    d[v] = new - old
            self._deltas[key] = d
        return d

    @staticmethod
    def _add(state: dict, delta: dict) -> None:
        for v, d in delta.items():
            if isinstance(d, dict):
                m = state[v]
                for k, x in d.items():
                    m[k] = m[k] + x if k in m else x
            else:
                state[v] = state[v] + d

    def _hook(self, interp: Interpreter, name: str, task: Task, node) -> Optional[dict]:
        """Run a hook on ``interp``'s State; return its delta when it is a delta hook."""
        if name in self._hook_keys:
            d = self._delta(name, task)
            self._add(interp.state, d)
            return d
        interp.run_hook(name, task, node, self.loop.now)
        return None

    def _run_hook(self, s: _Sched, name: str, task: Task, node) -> None:
        """Run a hook on a scheduler's own State, recording what periodic sync must push."""
        if s.interp is None or not self._keeps_state and s.role == "scheduler":
            return
        if self.plan.sync.kind != "periodic" or s.role != "scheduler" or not self.dynamic:
            self._hook(s.interp, name, task, node)
            return
        if name in self._hook_keys:
            d = self._delta(name, task)
            self._add(s.interp.state, d)
            for v, x in d.items():  # add deltas accumulate until the next push
                if isinstance(x, dict):
                    pend = s.unpushed.setdefault(v, {})
                    for k, y in x.items():
                        pend[k] = pend[k] + y if k in pend else y
                else:
                    s.unpushed[v] = s.unpushed[v] + x if v in s.unpushed else x
            return
        state = s.interp.state
        before = {v: (dict(state[v]) if isinstance(state[v], dict) else state[v]) for v in self.dynamic}
        s.interp.run_hook(name, task, node, self.loop.now)
        for v in self.dynamic:
            old, new = before[v], state[v]
            kind = self.merge[v]
            if isinstance(new, dict):
                changed = {k: x for k, x in new.items() if old.get(k) is not x}
                if not changed:
                    continue
                pend = s.unpushed.setdefault(v, {})
                for k, x in changed.items():
                    if kind == "add":
                        prev = old.get(k)
                        d = x - prev if prev is not None else x
                        pend[k] = pend[k] + d if k in pend else d
                    else:
                        pend[k] = x
            elif new is not old:
                if kind == "add":
                    d = new - old
                    s.unpushed[v] = s.unpushed[v] + d if v in s.unpushed else d
                else:
                    s.unpushed[v] = new

    def _push_pull(self, s: _Sched) -> None:
        store = self.store
        merge_into(store, s.unpushed, self.merge)
        s.unpushed = {}
        state = s.interp.state
        for v in self.dynamic:
            x = store[v]
            state[v] = dict(x) if isinstance(x, dict) else x

    # --------------------------------------------------------------- events
    def _next_arrival(self) -> None:
        task = next(self._arrivals, None)
        if task is not None:
            self.loop.at(task.arrival, ARRIVAL, self._arrive, task)

    def _arrive(self, task: Task) -> None:
        self._next_arrival()
        if math.isfinite(task.spec.timeout):
            self.loop.at(task.spec.deadline, TIMEOUT, self._timeout, task)
        self._hook(self.truth, "OnArrival", task, None)
        self.gp.add(task)
        s = self.central if self.plan.architecture != "decentralized" else self.locals[self._homes[task]]
        self._deliver(s, task)

    def _deliver(self, s: _Sched, task: Task) -> None:
        """A task reaches a scheduler's pending queue (its receive cost is charged when it is decided)."""
        s.received += 1
        s.add(task)
        self.where[task] = s
        if s.role == "selector" or self.plan.architecture == "decentralized":
            self._run_hook(s, "OnArrival", task, None)
        self._kick(s)

    def _recv_cost(self, s: _Sched, task: Task) -> float:
        if self._paid.get(task) is s:
            return 0.0
        self._paid[task] = s
        return s.costs.recv_s

    def _gp_remove(self, task: Task) -> None:
        self.gp.remove(task)

    def _timeout(self, task: Task) -> None:
        if task.status == "pending":
            if self.deadline == "dispatch" and (task in self.claimed or task in self.forwarded):
                return  # a scheduler committed to it in time: it will be placed
            task.status = "dropped"
            self.unresolved -= 1
            self.gp.remove(task)
            s = self.where.pop(task, None)
            if s is not None:
                s.remove(task)
            if task in self.forwarded:  # hybrid: the selector counted it and ran OnDispatch
                self.central.inbox.append((_FINISH, task))
                self._kick(self.central)
        elif task.status == "queued" and self.deadline == "start":
            self.cluster.drop(task)

    def _on_leave(self, task: Task) -> None:
        self._record_load(task.node)
        if task not in self.warm:
            self.unresolved -= 1
        self._hook(self.truth, "OnFinish", task, task.node)
        arch = self.plan.architecture
        if arch == "centralized":
            self.central.inbox.append((_FINISH, task))
            self._kick(self.central)
        elif arch == "decentralized":
            s = self.owner[task]
            s.inbox.append((_FINISH, task))
            self._kick(s)
        else:
            self.central.inbox.append((_FINISH, task))
            self._kick(self.central)
            if self.plan.local_state:
                s = self.owner[task]
                s.inbox.append((_FINISH, task))
                self._kick(s)
        self._room_event()

    def _room_event(self) -> None:
        """A slot freed: schedulers that found no room (probe/sample views) try again."""
        for s in self._wakeable:
            if s.blocked:
                delay = float(s.rng.uniform(0.0, s.attempt_s))
                self.loop.after(delay, DECIDE, self._wake, s)

    def _wake(self, s: _Sched) -> None:
        s.blocked = False
        self._kick(s)

    def _sync_tick(self, s: _Sched) -> None:
        if self.unresolved <= 0:
            return
        if not s.sync_queued:  # one sync catches up everything: a tick while one waits or runs adds nothing
            s.sync_queued = True
            s.inbox.append((_SYNC, None))
            self._kick(s)
        self.loop.after(self.plan.sync.period_s, ARRIVAL, self._sync_tick, s)

    # ----------------------------------------------------------- scheduling
    def _kick(self, s: _Sched) -> None:
        if not s.busy:
            self._step(s)

    def _busy(self, s: _Sched, cost: float, fn, *args) -> None:
        if s.view is not None and s.costs.heartbeat_s > 0:
            # heartbeat rounds that arrive while the scheduler works extend its work; idle time absorbs the others
            now = self.loop.now
            counted, end = 0, now + cost
            if self._round_from(s, now) < end:  # mostly not: work lasts a fraction of the period
                while True:
                    n = self._ticks(s, now, end)
                    if n == counted:
                        break
                    end += (n - counted) * s.costs.heartbeat_s
                    counted = n
            cost = end - now
        s.busy = True
        s.busy_s += cost
        self.loop.after(cost, DECIDE, fn, s, *args)

    def _tick(self, s: _Sched, j: int) -> float:
        """Time of heartbeat round ``j`` of ``s``: somewhere in period j, at a pseudo-random offset.

        Rounds jitter within their period (a hash of the seed, the scheduler and
        j), so no scheduler is systematically the first to learn of a free slot.
        """
        x = (self._hb_seed * 0x9E3779B1 + s.hb_index * 0x85EBCA77 + j * 0xC2B2AE3D) & 0xFFFFFFFF
        x ^= x >> 15
        x = (x * 0x2C1B3C6D) & 0xFFFFFFFF
        x ^= x >> 12
        return (j + x / 2.0 ** 32) * self.plan.load.period_s

    def _last_tick(self, s: _Sched, t: float) -> float:
        """The latest heartbeat round of ``s`` at or before ``t`` (-inf before the first)."""
        j = math.floor(t / self.plan.load.period_s)
        for k in (j, j - 1):
            if k >= 0 and self._tick(s, k) <= t:
                return self._tick(s, k)
        return -math.inf

    def _next_tick(self, s: _Sched, t: float) -> float:
        j = math.floor(t / self.plan.load.period_s)
        for k in (j, j + 1):
            if self._tick(s, k) > t:
                return self._tick(s, k)
        return self._tick(s, j + 2)

    def _round_from(self, s: _Sched, t: float) -> float:
        """The first heartbeat round of ``s`` at or after ``t``."""
        j = math.floor(t / self.plan.load.period_s)
        first = self._tick(s, j)
        return first if first >= t else self._tick(s, j + 1)

    def _ticks(self, s: _Sched, start: float, end: float) -> int:
        """Heartbeat rounds of ``s`` in [start, end)."""
        h = self.plan.load.period_s
        return sum(1 for k in range(max(0, math.floor(start / h)), math.floor(end / h) + 1) if start <= self._tick(s, k) < end)

    def _record_load(self, node: Node) -> None:
        times, loads = self._hist[node.index]
        times.append(self.loop.now)
        loads.append(node.load)

    def _step(self, s: _Sched) -> None:
        if s.inbox:
            kind, payload = s.inbox.popleft()
            cost = s.costs.finish_s if kind == _FINISH else s.costs.sync_s
            self._busy(s, cost, self._item_done, kind, payload)
            return
        if not s.pending or s.blocked:
            return
        if s.role == "selector" and self.plan.architecture == "hybrid":
            self._select(s)
        else:
            self._attempt(s)

    def _item_done(self, s: _Sched, kind: str, payload) -> None:
        s.busy = False
        if kind == _FINISH:
            task = payload
            if s.role == "selector" and self.plan.architecture == "hybrid":
                self.forwarded.pop(task, None)
                self.outstanding -= 1
                s.blocked = False
                self._run_hook(s, "OnFinish", task, None)
            elif task.node is not None:
                self._run_hook(s, "OnFinish", task, task.node)
        elif kind == _SYNC:
            s.sync_queued = False
            self._push_pull(s)
        self._step(s)

    # hybrid selector ------------------------------------------------------
    def _select(self, s: _Sched) -> None:
        if self.outstanding >= self.total_slots:
            s.blocked = True
            return
        s.attempts += 1
        heads = s.pending.heads()
        pick = s.scoring.scores(s.interp, heads, self.nodes[:1], self.loop.now).argmin()
        if pick is None:
            s.failed += 1
            s.blocked = True
            return
        task = heads[pick[0]]
        s.remove(task)
        self.where.pop(task, None)
        self.claimed.add(task)
        self._busy(s, s.costs.compute_s + self._recv_cost(s, task) + s.costs.send_s, self._forward_done, task, self.loop.now)

    def _forward_done(self, s: _Sched, task: Task, decided_at: float) -> None:
        s.busy = False
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
    def _with_room(self) -> list[Node]:
        return [x for x in self.nodes if x.load < x.slots]  # has_room, without a property call per node

    def _view(self, s: _Sched) -> list:
        kind = self.plan.load.kind
        if kind == "probe":
            return self._with_room()
        if kind == "sample":
            n = len(self.nodes)
            d = min(self.plan.load.d, n)
            picks = sorted(s.rng.choice(n, size=d, replace=False)) if d < n else range(n)
            return [self.nodes[i] for i in picks if self.nodes[i].has_room]
        now = self.loop.now
        if now >= s.view_next:  # a heartbeat round may have come since the view was last brought up to date
            tick = self._last_tick(s, now)
            if tick != s.view_tick:
                s.view_tick = tick
                for v, (times, loads) in zip(s.view, self._hist):
                    v.load = loads[bisect.bisect_right(times, tick) - 1] if tick >= 0 else loads[0]
                s.own = [x for x in s.own if x[0] > tick]
                for _, i in s.own:
                    s.view[i].load += 1
            s.view_next = self._next_tick(s, now)
        return [v for v in s.view if v.load < v.slots]

    def _attempt(self, s: _Sched) -> None:
        s.attempts += 1
        now = self.loop.now
        cost = s.attempt_s
        cands = self._view(s)
        pick = None
        if cands:
            rows = s.pending[:1] if s.fifo else s.pending.heads()
            pick = s.scoring.scores(s.interp, rows, cands, now).argmin()
        if pick is None:
            s.failed += 1
            s.blocked = True
            if s.view is not None:  # learn of room at the next heartbeat
                nxt = self._next_tick(s, now)
                if s.wake_at < nxt:
                    s.wake_at = nxt
                    self.loop.at(nxt, ARRIVAL, self._wake, s)
            self._busy(s, cost, self._attempt_failed)
            return
        i, j = pick
        task = rows[i]
        s.remove(task)
        self.where.pop(task, None)
        self.claimed.add(task)
        view = cands[j]
        node = view.node if isinstance(view, _ViewNode) else view
        self._busy(s, cost + self._recv_cost(s, task) + s.costs.send_s, self._dispatch_done, task, node, now)

    def _attempt_failed(self, s: _Sched) -> None:
        s.busy = False
        self._step(s)

    def _dispatch_done(self, s: _Sched, task: Task, node: Node, decided_at: float) -> None:
        s.busy = False
        self.claimed.discard(task)
        if task.status == "pending":
            if node.has_room and node.fits(task):
                sample = (self._sample(task, node, self.forwarded.get(task, decided_at))
                          if self.record_cr and self.loop.now >= self.cr_from else None)
                self.cluster.dispatch(task, node)
                self._record_load(node)
                self.gp.remove(task)
                self.forwarded.pop(task, None)
                s.decisions += 1
                self.owner[task] = s
                self.placed_by[task.id] = s.name
                self._hook(self.truth, "OnDispatch", task, node)
                if self.plan.architecture != "hybrid" or self.plan.local_state:
                    self._run_hook(s, "OnDispatch", task, node)
                if s.view is not None:
                    s.view[node.index].load += 1
                    s.own.append((self.loop.now, node.index))
                if sample is not None:
                    self.cr_impl.append(sample[0])
                    self.cr_ideal.append(sample[1])
                    if self.settle is not None and len(self.cr_impl) % self.settle.batch == 0:
                        self._maybe_stop()
            else:
                s.bounces += 1
                if self.deadline == "dispatch" and task not in self.forwarded and self.loop.now >= task.spec.deadline:
                    self._timeout(task)  # refused after its deadline: dropped
                else:
                    s.add(task)
                    self.where[task] = s
        self._step(s)

    # -------------------------------------------------- competitive ratio
    def _maybe_stop(self) -> None:
        """End the run here if the competitive ratio is settled; the metrics' window ends here too."""
        if self.settle.done(self.cr_impl, self.cr_ideal):
            self.stopped_at = self.loop.now
            self.window = (self.window[0], max(min(self.window[1], self.loop.now), self.window[0] + 1e-9))
            self.loop.stop()

    def _sample(self, task: Task, node: Node, decided_at: float) -> Optional[tuple[float, float]]:
        """(S, S*) for the competitive ratio, on the exact global state as the decision takes effect.

        The ideal chooses among the tasks that had arrived when the plan
        started deciding (``decided_at``; for a hybrid, when the selector
        picked). S = Score_ideal(t_impl, n_impl). The ideal scheduler would now place
        m = min(#pending, #free slots) tasks, the best first; S* is the score
        of the m-th of them (each pending task at its best node) -- the
        ideal decision the plan's one displaces. Under contention (one free
        slot) that is the paper's argmin; when there is room for every
        pending task, the order does not matter and any task is ideal.
        """
        self._cr_count += 1
        if (self._cr_count - 1) % self.cr_every:
            return None
        heads = self.gp.heads(decided_at)
        cands = self._with_room()
        if not heads or not cands:
            return None
        now = self.loop.now
        scores = self.scoring.scores(self.truth, heads, cands, now)
        best = self._mth_best(scores.row_min(), [self.gp.count(h, decided_at) for h in heads], cands)
        g = self.gp._k(task)
        row = next((r for r, h in enumerate(heads) if self.gp._k(h) == g), None)
        if row is not None and node in cands:
            mine = scores.cell(row, cands.index(node))
        else:
            mine = self.scoring.pair(self.truth, task, node, now)
        return mine, best

    @staticmethod
    def _mth_best(best_per_group: list[float], counts: list[int], cands: list) -> float:
        """The score of the m-th best pending task, m = min(#pending, #free slots), each group's tasks
        at the group's best score, groups tied in queue order (a stable sort)."""
        free = sum(x.slots - x.load for x in cands)
        m = max(1, min(free, sum(counts)))
        reach = 0
        for g in sorted(range(len(counts)), key=best_per_group.__getitem__):
            reach += counts[g]
            if reach >= m:  # the m-th best task lies in the first group reaching m
                return best_per_group[g]
        raise AssertionError("m exceeds the pending tasks")

    # ------------------------------------------------------------------ run
    def run(self) -> SimResult:
        with np.errstate(all="ignore"):  # as in the interpreter: inf and NaN scores are values (split scoring combines parts)
            events = self.loop.run()
        stats = [SchedulerStats(s.name, s.role, s.busy_s, s.received, s.attempts, s.failed, s.bounces, s.decisions)
                 for s in self._all]
        return SimResult(self.plan, self.tasks, stats, np.array(self.cr_impl), np.array(self.cr_ideal),
                         self.window, self.placed_by, events)


def simulate(plan: SimPlan, scenario: Scenario, seed: int = 0, warmup: float = 0.0, record_cr: bool = True,
             cr_every: int = 1, deadline: str = "dispatch", prefill: bool = False, cr_from: float = 0.0,
             source: str = "<scenario>", settle: Optional[M.Settle] = None, validate: bool = True) -> SimResult:
    """Run ``plan`` on ``scenario`` and return the result (deterministic for a seed).

    ``warmup``: seconds at the start left out of the metrics. ``cr_every``:
    sample the competitive ratio at every n-th decision. ``deadline``: what
    a task's timeout bounds, its ``dispatch`` (default here: no work is
    wasted under overload) or its ``start`` (the replay's default); see
    :mod:`ray_adaptive.sim.model`. ``prefill``: start with every node slot
    busy (the steady state of an overloaded cluster), see :meth:`PlanSim._prefill`.
    ``cr_from``: sample the competitive ratio only from this time on.
    ``settle``: stop as soon as the competitive ratio is settled (see
    :class:`~ray_adaptive.sim.metrics.Settle`; the compiler's replays).
    ``validate``: check the tasks' fields against the policy first (the
    compiler checked its window once, for every plan's replay).
    """
    with gc_paused():
        return PlanSim(plan, scenario, seed=seed, warmup=warmup, record_cr=record_cr, cr_every=cr_every,
                       deadline=deadline, prefill=prefill, cr_from=cr_from, source=source, settle=settle,
                       validate=validate).run()
