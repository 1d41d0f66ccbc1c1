"""What each role of a plan runs: lowering a :class:`~ray_adaptive.sim.plans.SimPlan` to role specs.

A plan has at most two roles (the compiler's placement map says which
units run where):

* ``selector`` -- one instance with the global pending queue: the whole
  policy (centralized) or the task part of Score with the pool of all slots
  as its only candidate (hybrid);
* ``schedulers`` -- k instances: the whole policy on each one's own tasks,
  State replicated (decentralized), or the node part of Score over the
  tasks the selector forwards, in order (hybrid).

:func:`role_specs` is the only place that reads the architecture; the
topology builder hosts whatever specs it gets (see
:mod:`ray_adaptive.runtime.topology`), the same code for every plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from ray_adaptive.dsl.ir import Policy
from ray_adaptive.sim.plans import SimPlan
from ray_adaptive.sim.scoring import ScoreSplit

__all__ = ["RoleSpec", "role_specs", "lease_spec"]


@dataclass(frozen=True)
class RoleSpec:
    """How to build one role's :class:`~ray_adaptive.runtime.scheduler.Scheduler`."""

    program: Policy
    hooks: bool = True  # runs OnArrival/OnDispatch/OnFinish on its State
    fifo: bool = False  # serves tasks in the order received (scores only the head)
    pool: bool = False  # its one candidate is the pool of all slots (decides the task, not the node)
    sample_d: int = 0  # power-of-d: nodes scored per decision (0: all)
    merge: Optional[Dict[str, str]] = None  # replicated State: how pushed changes merge
    sync_s: float = 0.0  # push changes / pull State every sync_s (0: before every decision batch)
    heartbeat_s: float = 0.0  # learn the others' loads every heartbeat_s (0: before every batch)
    split: Optional[ScoreSplit] = None  # the compiler's proof that ``program``'s Score is T(task) op N(node)


def role_specs(plan: SimPlan) -> Dict[str, RoleSpec]:
    """``{"selector": spec, "schedulers": spec}``, with only the roles the plan has."""
    d = plan.load.d if plan.load.kind == "sample" else 0
    heartbeat = plan.load.period_s if plan.load.kind == "cached" else 0.0
    merge = {v: rule for v, rule in plan.merge} or None
    sync_s = plan.sync.period_s if plan.sync.kind == "periodic" else 0.0
    if plan.architecture == "centralized":
        return {"selector": RoleSpec(plan.policy, sample_d=d, split=plan.split)}
    if plan.architecture == "decentralized":
        return {"schedulers": RoleSpec(plan.policy, sample_d=d, merge=merge, sync_s=sync_s, heartbeat_s=heartbeat,
                                       split=plan.split)}
    # hybrid: the selector keeps the exact State the task part reads; the placement schedulers
    # keep a replica only when their node part reads State hooks change (plan.local_state)
    local = plan.local_state
    return {
        "selector": RoleSpec(plan.task_policy, pool=True, split=plan.task_split),
        "schedulers": RoleSpec(plan.node_policy, hooks=local, fifo=True, sample_d=d, merge=merge if local else None,
                               sync_s=sync_s, heartbeat_s=heartbeat, split=plan.node_split),
    }


def lease_spec(plan: SimPlan) -> Optional[RoleSpec]:
    """What a lone submitting process runs while it holds the selector's lease (None: no lease).

    The whole policy over every node -- the decision the plan's selector makes
    (centralized) or approximates with its placement schedulers (hybrid). A
    hybrid whose placements keep a replica of State (``plan.local_state``)
    never leases: the holder's hooks would change State those replicas never see.
    """
    specs = role_specs(plan)
    if "selector" not in specs:
        return None
    if "schedulers" not in specs:
        return specs["selector"]
    if plan.local_state:
        return None
    return RoleSpec(plan.policy, sample_d=specs["schedulers"].sample_d, split=plan.split)
