"""What each role of a plan runs: lowering a :class:`~ray_adaptive.plan.lowered.LoweredPlan` to role specs.

A plan has at most two roles (the compiler's placement map says which
units run where):

* ``selector`` -- one instance with the global pending queue: the whole
  policy (centralized) or the task part of Score with the pool of all slots
  as its only candidate (hybrid);
* ``schedulers`` -- k instances: the whole policy on each one's own tasks,
  State replicated (decentralized), or the node part of Score over the
  tasks the selector forwards, in order (hybrid).

:func:`role_specs` is the only place that reads the architecture; the
runtime's topology builder (:mod:`ray_adaptive.runtime.topology`) and the
simulator (:mod:`ray_adaptive.sim.hosts`) host whatever specs they get, the
same code for every plan. Besides how to build its scheduler, a spec says
what a host needs to know of the role: whether tasks enter there (``entry``),
whether its picks go on to the schedulers role (``forwards``), whether it
handles finishes (``finishes``), how it learns loads (``view``) and whether
it waits for a freed slot (``wakes_on_room``). Its hooks follow: a role that
keeps State (``hooks``) runs OnArrival where tasks enter, OnDispatch on what
it decides (a forwarding role without the node: it decides the task) and
OnFinish on the finishes it handles.

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> from ray_adaptive.plan import LoweredPlan, Plan
    >>> specs = role_specs(LoweredPlan(Plan("centralized", "centralized"), load_policy("least_loaded")))
    >>> list(specs), specs[Role.SELECTOR].fifo, specs[Role.SELECTOR].entry
    ([<Role.SELECTOR: 'selector'>], False, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Sequence

from ray_adaptive.dsl.ir import Policy
from ray_adaptive.plan.kinds import Architecture, LoadKind, Role, SyncKind
from ray_adaptive.plan.lowered import LoweredPlan
from ray_adaptive.plan.plans import LoadView
from ray_adaptive.plan.scheduler import POOL, NodeState, Scheduler
from ray_adaptive.plan.scoring import ScoreSplit

__all__ = ["RoleSpec", "role_specs", "lease_spec"]


@dataclass(frozen=True)
class RoleSpec:
    """How to build one role's :class:`~ray_adaptive.plan.scheduler.Scheduler`."""

    program: Policy
    hooks: bool = True  # runs OnArrival/OnDispatch/OnFinish on its State
    fifo: bool = False  # serves tasks in the order received (scores only the head)
    pool: bool = False  # its one candidate is the pool of all slots (decides the task, not the node)
    sample_d: int = 0  # power-of-d: nodes scored per decision (0: all)
    merge: Optional[Dict[str, str]] = None  # replicated State: how pushed changes merge
    sync_s: float = 0.0  # push changes / pull State every sync_s (0: before every decision batch)
    heartbeat_s: float = 0.0  # learn the others' loads every heartbeat_s (0: before every batch)
    split: Optional[ScoreSplit] = None  # the compiler's proof that ``program``'s Score is T(task) op N(node)
    overflow: bool = False  # a full cluster's tasks are decided at once, held by Ray (see plan.holding)
    # -- how a host runs it (the simulator hosts a plan's roles by these, never by the architecture)
    entry: bool = False  # submitted tasks enter here: at the one selector, or at the submitter's own one of k
    forwards: bool = False  # sends each task it picks on to the schedulers role (in turn), which picks the node
    finishes: bool = True  # handles the finish of each task it decided: OnFinish on its State, its room count
    view: LoadView = LoadView()  # how it learns node loads (sample_d and heartbeat_s: the runtime's share of it)
    wakes_on_room: bool = True  # finding no room in its view, it tries again when a slot frees (else: at its
    #                             next heartbeat, or when a task it forwarded finishes)

    def scheduler(self, nodes: Sequence[NodeState], seed: int = 0, records: int = 0,
                  newest_first: Optional[float] = None) -> Scheduler:
        """This role's scheduler over the cluster's nodes (each seen afresh: see :meth:`NodeState.fresh`),
        keeping its last ``records`` decisions (see :mod:`ray_adaptive.plan.explain`); ``newest_first``:
        see :mod:`ray_adaptive.plan.queue`."""
        views = [n.fresh() for n in nodes]
        if self.pool:
            views = [NodeState(POOL, 0, sum(n.executors for n in views), sum(n.queue for n in views), {})]
        return Scheduler(self.program, views, hooks=self.hooks, fifo=self.fifo, sample_d=self.sample_d,
                         merge=self.merge, seed=seed, num_nodes=len(nodes), split=self.split, records=records,
                         overflow=self.overflow, newest_first=newest_first)


def role_specs(plan: LoweredPlan, overflow: bool = False) -> Dict[Role, RoleSpec]:
    """``{Role.SELECTOR: spec, Role.SCHEDULERS: spec}``, with only the roles the plan has.
    ``overflow``: Ray holds the tasks of a full cluster (see :mod:`ray_adaptive.plan.holding`),
    wherever the whole policy decides (a centralized selector, decentralized schedulers; the
    hybrid's selector and placements keep their gate: they pick task and node apart)."""
    d = plan.load.d if plan.load.kind is LoadKind.SAMPLE else 0
    heartbeat = plan.load.period_s if plan.load.kind is LoadKind.CACHED else 0.0
    merge = {v: rule for v, rule in plan.merge} or None
    sync_s = plan.sync.period_s if plan.sync.kind is SyncKind.PERIODIC else 0.0
    # a role picking nodes sees them through the plan's load view; with a cached one it learns of a
    # freed slot at its next heartbeat
    view, wakes = plan.load, plan.load.kind is not LoadKind.CACHED
    if plan.architecture is Architecture.CENTRALIZED:
        return {Role.SELECTOR: RoleSpec(plan.policy, sample_d=d, split=plan.split, overflow=overflow, entry=True,
                                        view=view, wakes_on_room=wakes)}
    if plan.architecture is Architecture.DECENTRALIZED:
        return {Role.SCHEDULERS: RoleSpec(plan.policy, sample_d=d, merge=merge, sync_s=sync_s, heartbeat_s=heartbeat,
                                          split=plan.split, overflow=overflow, entry=True, view=view,
                                          wakes_on_room=wakes)}
    # hybrid: the selector keeps the exact State the task part reads, and counts the slots its forwarded
    # tasks hold (it waits for one of them to finish); the placement schedulers keep a replica only when
    # their node part reads State hooks change (plan.local_state), and only then handle finishes
    local = plan.local_state
    assert plan.task_policy is not None and plan.node_policy is not None  # (a hybrid LoweredPlan has both)
    return {
        Role.SELECTOR: RoleSpec(plan.task_policy, pool=True, split=plan.task_split, entry=True, forwards=True,
                                wakes_on_room=False),
        Role.SCHEDULERS: RoleSpec(plan.node_policy, hooks=local, fifo=True, sample_d=d,
                                  merge=merge if local else None, sync_s=sync_s, heartbeat_s=heartbeat,
                                  split=plan.node_split, finishes=local, view=view, wakes_on_room=wakes),
    }


def lease_spec(plan: LoweredPlan, overflow: bool = False,
               specs: Optional[Dict[Role, RoleSpec]] = None) -> Optional[RoleSpec]:
    """What a lone submitting process runs while it holds the selector's lease (None: no lease);
    ``specs``: the plan's :func:`role_specs`, if the caller has them.

    The whole policy over every node -- the decision the plan's selector makes
    (centralized) or approximates with its placement schedulers (hybrid). A
    hybrid whose placements keep a replica of State (``plan.local_state``)
    never leases: the holder's hooks would change State those replicas never see.
    Nor does a policy with Preempt: its victims are chosen, and their stops
    timed, at the selector (:mod:`ray_adaptive.runtime.selector_preempt`).
    """
    specs = specs if specs is not None else role_specs(plan, overflow)
    if Role.SELECTOR not in specs or plan.policy.preempt is not None:
        return None
    if Role.SCHEDULERS not in specs:
        return specs[Role.SELECTOR]
    if plan.local_state:
        return None
    placing = specs[Role.SCHEDULERS]
    return RoleSpec(plan.policy, sample_d=placing.sample_d, split=plan.split, overflow=overflow, entry=True,
                    view=placing.view, wakes_on_room=placing.wakes_on_room)
