"""Simulate an implementation plan on the cluster model.

The same nodes, queues, timeouts and event order as the ideal replay
(:mod:`ray_adaptive.sim.cluster`, :mod:`ray_adaptive.sim.events`), with
schedulers that take time and see only part of the truth:

* **The roles are hosted as the runtime hosts them.** :func:`~ray_adaptive.plan.roles.role_specs`
  says which roles a plan has and what each runs; :mod:`ray_adaptive.sim.hosts`
  makes and drives each role's schedulers from its spec alone -- nothing
  here reads the plan's architecture. A centralized plan is one selector
  (every task, the exact State); a decentralized one, k schedulers, a task
  entering at its submitter's own (submitters take homes in order of first
  appearance, modulo k; tasks without a submitter go round-robin), each with
  a replica of State (``instant`` sync: one store, reads and writes charged;
  ``periodic``: local changes pushed and the merged State pulled every
  period -- ``add`` deltas sum, ``max``/``min`` merge, others: last writer
  wins); a hybrid, a selector that picks the task by the task part of Score
  (exact State; OnDispatch as it forwards, OnFinish on finish notifications)
  and forwards it, while its count of the slots its tasks hold shows room,
  in turn to k placement schedulers that pick the node by the node part.
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
* **Hooks**: a scheduler runs OnArrival / OnDispatch / OnFinish on its own
  State when it handles the message; a separate *truth* interpreter runs them
  at the true moments (arrival, dispatch, leave). That exact global State,
  all pending tasks and the true candidates are what the ideal decision is
  taken on when the **competitive ratio** is sampled: at each decision,
  ``Score_ideal(t_impl, n_impl)`` vs ``Score_ideal(t_ideal, n_ideal)`` (see
  :func:`ray_adaptive.sim.metrics.competitive_ratio`). For a hybrid decision
  (two steps) the ideal chooses among the tasks that had arrived when the
  selector picked.

What a run keeps whatever plan is in force -- the cluster, the clock, the
tasks and who holds them, the truth, the metrics -- is its books
(:mod:`ray_adaptive.sim.bookkeeping`). A run may start from a busy cluster
(:mod:`ray_adaptive.sim.prefill`) and be handed over to another plan's
schedulers mid-way (:meth:`PlanSim.switch`, :mod:`ray_adaptive.sim.live_switch`),
as the runtime's switch does; the adaptive controller drives that in
:mod:`ray_adaptive.sim.adaptive`.

Deterministic for a seed.

Why two drivers of one decision step: the runtime decides in batches, as
fast as real time allows, while the simulator must charge each attempt
its modelled latency before its effect -- a bounce, an inbox served in
between -- so its driver is this event-driven server; the queue, the
scoring and the State hooks are the runtime's own.

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> from ray_adaptive.plan import LoweredPlan, Plan, RoleCosts
    >>> from ray_adaptive.workload.generate import paper_workload
    >>> plan = LoweredPlan(Plan("centralized", "centralized"), load_policy("drf_lb"),
    ...                    central=RoleCosts(recv_s=7e-4, send_s=7e-4, finish_s=7e-4, probe_s=3.5e-5))
    >>> r = simulate(plan, paper_workload(300, seconds=1.0))
    >>> r.metrics().goodput > 250
    True
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import numpy as np

from ray_adaptive.dsl.interp import Interpreter
from ray_adaptive.plan import LoadKind, LoweredPlan, Role, role_specs
from ray_adaptive.sim import metrics as M
from ray_adaptive.sim.bookkeeping import Books
from ray_adaptive.sim.events import ARRIVAL, gc_paused
from ray_adaptive.sim.hosts import RoleHost, SchedulersHost, SelectorHost
from ray_adaptive.sim.live_switch import check_switch, switch
from ray_adaptive.sim.membership import RESIZE_PAUSE_S, NodeEvent, check_events
from ray_adaptive.sim.model import DEADLINES
from ray_adaptive.sim.prefill import prefill as prefill_slots
from ray_adaptive.sim.replication import HookRunner
from ray_adaptive.sim.results import Metrics, SchedulerStats, SimResult
from ray_adaptive.sim.servers import Server
from ray_adaptive.workload.scenario import Scenario, check_fields, check_placeable

__all__ = ["simulate", "PlanSim", "SimResult", "SchedulerStats", "Metrics", "periodic_overload"]


class PlanSim:
    """One run of ``plan`` on ``scenario`` (see the module doc for the model): its books, the hosts of the
    plan in force, and what can be done with a run -- advance it, switch its plan, read its result."""

    def __init__(self, plan: LoweredPlan, scenario: Scenario, seed: int = 0, warmup: float = 0.0,
                 record_cr: bool = True, cr_every: int = 1, deadline: str = "dispatch", prefill: "bool | float" = False,
                 cr_from: float = 0.0, source: str = "<scenario>", settle: Optional[M.Settle] = None,
                 validate: bool = True, events: Sequence[NodeEvent] = (),
                 relower: Optional[Callable[[LoweredPlan, int], LoweredPlan]] = None,
                 resize_pause_s: float = RESIZE_PAUSE_S):
        """``events``: nodes joining and leaving during the run (:mod:`ray_adaptive.sim.membership`), each
        a live switch to the plan in force on the new nodes, pausing ``resize_pause_s``; ``relower(plan,
        n)``: the plan to put in force on n nodes -- the plan in force lowered for them (its costs; None:
        the plan as it is), or the one an adaptive controller chose at the event."""
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
        joining = check_events(events, scenario.nodes)
        if isinstance(resize_pause_s, bool) or not (isinstance(resize_pause_s, (int, float)) and 0 <= resize_pause_s < math.inf):
            raise ValueError(f"resize_pause_s must be a number of seconds >= 0, got {resize_pause_s!r}")
        self.deadline, self.seed = deadline, seed
        self.relower, self.resize_pause_s = relower, resize_pause_s
        self.resizes: list[dict] = []  # each node event as it happened: time, joined, left, members, the switch
        self.on_resize: Optional[Callable[[dict], None]] = None  # told of each node event, after its switch
        self.books = b = Books(plan.policy, scenario, seed, warmup, deadline, record_cr, cr_from, cr_every, settle,
                               joining)
        self.loop, self.cluster, self.nodes, self.tasks = b.loop, b.cluster, b.nodes, b.tasks
        self.retired: list[Server] = []  # the schedulers of the plans switched from (their counters)
        self.generation = 0  # plans switched to so far
        self.events = 0  # events run so far
        self.install(plan)
        if prefill and self.tasks:
            prefill_slots(b, b.hosts, 1.0 if prefill is True else float(prefill))
            b.history.reset()  # the prefilled loads are every view's first
        # the ideal's scoring (the competitive ratio's): the first plan's, whatever plan is in force later
        b.start(b.scoring(plan.policy, plan.split, b.any_resources, b.key))
        for e in events:
            self.loop.at(e.time, ARRIVAL, self._node_event, e)

    def _node_event(self, e: NodeEvent) -> None:
        """Nodes join and leave at ``e.time``: the plan in force, on the new members, with a switch's pause."""
        b, now = self.books, self.loop.now
        b.set_members([n.id for n in e.join], e.leave)
        plan = self.relower(self.plan, len(b.members)) if self.relower is not None else self.plan
        info = self.switch(plan, now, self.resize_pause_s)
        self.resizes.append({"time": now, "joined": len(e.join), "left": len(e.leave), "nodes": len(b.members),
                             "executors": sum(n.executors for n in b.members), "plan": plan.name,
                             "undecided": info["undecided"], "on_nodes": info["on_nodes"], "from": info["from"]})
        if self.on_resize is not None:
            self.on_resize(self.resizes[-1])

    @property
    def size(self) -> tuple[int, int]:
        """The cluster now: its nodes and their executors (draining nodes left out)."""
        members = self.books.members
        return len(members), sum(n.executors for n in members)

    def install(self, plan: LoweredPlan, state: Optional[dict] = None) -> None:
        """Host ``plan``'s roles and put it in force; each scheduler starts from ``state`` (None: the
        initial State). What a plan decides about -- its roles, their programs and views, its hooks'
        replication -- is set here; the books belong to the run."""
        b = self.books
        n = len(b.members)
        self.plan = plan
        hooks = HookRunner(plan, n, b.keys)
        specs = role_specs(plan)
        hosts: list[RoleHost] = []
        if Role.SELECTOR in specs:
            hosts.append(SelectorHost(b, specs[Role.SELECTOR], plan.central, self.seed, state))
        if Role.SCHEDULERS in specs:  # (their random numbers follow the selector's)
            hosts.append(SchedulersHost(b, specs[Role.SCHEDULERS], plan.local, plan.k(n), self.seed, len(hosts) + 1,
                                        state))
        for h in hosts:
            if h.spec.forwards:
                h.placements = next(x for x in hosts if x.role is Role.SCHEDULERS)
        if hooks.periodic:  # (every replica's first State)
            hooks.start_store(state if state is not None else Interpreter(plan.policy, num_nodes=n).state)
        b.put_in_force(hosts, hooks)

    # ------------------------------------------------------------ reading
    @property
    def window(self) -> tuple[float, float]:
        """The metrics' window: warm-up to the last arrival (or where the run was stopped)."""
        return self.books.window

    @property
    def ratio(self):
        """The competitive-ratio samples so far (a :class:`~ray_adaptive.sim.ratio.RatioSampler`)."""
        return self.books.ratio

    @property
    def stopped_at(self) -> Optional[float]:
        """When a settled competitive ratio stopped the run (None: it was not)."""
        return self.books.stopped_at

    @property
    def unresolved(self) -> int:
        """Tasks neither finished nor dropped yet."""
        return self.books.unresolved

    @property
    def hosts(self) -> list[RoleHost]:
        """The roles of the plan in force (selector first)."""
        return self.books.hosts

    def servers(self) -> list[Server]:
        """The plan in force's selector (if any) and the schedulers it used so far."""
        return [s for h in self.books.hosts for s in h.servers()]

    # ------------------------------------------------------------ running
    def switch(self, plan: LoweredPlan, now: float, pause_s: float = 0.0) -> dict:
        """Hand the run over to ``plan``'s schedulers at ``now`` (the time the run was advanced to), as
        the runtime's live switch does (:mod:`ray_adaptive.runtime.switch`): nothing lost, nothing run
        twice; no scheduler works for ``pause_s``. Returns what was handed over (see
        :mod:`ray_adaptive.sim.live_switch`)."""
        check_switch(self, plan, now, pause_s, periodic_overload(plan))
        return switch(self, plan, now, pause_s)

    def resume(self, generation: int) -> None:
        """A switch's pause is over: the new plan's schedulers start on what waited."""
        if generation != self.generation:  # (a later switch's pause is in force)
            return
        self.books.frozen = False
        for h in self.books.hosts:
            for s in h.servers():
                h.kick(s)

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
        b = self.books
        if until < b.window[1]:
            b.window = (b.window[0], max(until, b.window[0] + 1e-9))
        self.advance(until)
        return self.result()

    def result(self) -> SimResult:
        """What the run did so far."""
        b = self.books
        end = min(b.ended_at, self.loop.now) - 1e-12
        # (the rounds dormant schedulers skipped so far: their busy time)
        stats = [s.stats(extra_busy=0.0 if s.ticking else h.skipped_busy(s, end)) for h in b.hosts for s in h.servers()]
        stats += [s.stats() for s in self.retired]  # (a plan switched from: what its schedulers did before)
        return SimResult(self.plan, self.tasks, stats, np.array(b.ratio.impl), np.array(b.ratio.ideal),
                         b.window, b.placed_by, self.events, np.array(b.ratio.times))


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
             until: float = math.inf, events: Sequence[NodeEvent] = (),
             relower: Optional[Callable[[LoweredPlan, int], LoweredPlan]] = None,
             resize_pause_s: float = RESIZE_PAUSE_S) -> SimResult:
    """Run ``plan`` on ``scenario`` and return the result (deterministic for a seed).

    ``warmup``: seconds at the start left out of the metrics. ``cr_every``:
    sample the competitive ratio at every n-th decision. ``deadline``: what
    a task's timeout bounds, its ``dispatch`` (default here: no work is
    wasted under overload) or its ``start`` (the replay's default); see
    :mod:`ray_adaptive.sim.model`. ``prefill``: start with every node slot
    busy (True: the steady state of an overloaded cluster), or that share of
    the executors (a number below 1), see :mod:`ray_adaptive.sim.prefill`.
    ``cr_from``: sample the competitive ratio only from this time on.
    ``settle``: stop as soon as the competitive ratio is settled above the
    limit (see :class:`~ray_adaptive.sim.metrics.Settle`; the compiler's replays).
    ``validate``: check the tasks' fields against the policy first (the
    compiler checked its window once, for every plan's replay). ``until``: stop
    there (simulated seconds) rather than when every task is resolved. ``events``: nodes joining and
    leaving during the run (:mod:`ray_adaptive.sim.membership`: a leaving node is drained), each a live
    switch to the plan in force on the new nodes (``relower(plan, n)``: it lowered for n nodes), pausing
    ``resize_pause_s``.
    """
    with gc_paused():
        return PlanSim(plan, scenario, seed=seed, warmup=warmup, record_cr=record_cr, cr_every=cr_every,
                       deadline=deadline, prefill=prefill, cr_from=cr_from, source=source, settle=settle,
                       validate=validate, events=events, relower=relower, resize_pause_s=resize_pause_s).run(until)
