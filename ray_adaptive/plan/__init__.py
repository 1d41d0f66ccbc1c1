"""What a plan is, declared once, below both of its users.

The compiler emits plans (:mod:`ray_adaptive.compiler`); the simulator
(:mod:`ray_adaptive.sim`) and the runtime (:mod:`ray_adaptive.runtime`)
execute them. So that the simulator executes exactly what the runtime
runs, everything a plan *is* lives here:

* :mod:`~ray_adaptive.plan.kinds` -- the closed sets (architectures, roles, load views, sync, merge rules);
* :mod:`~ray_adaptive.plan.plans` -- :class:`Plan`: where units run, which approximations apply;
* :mod:`~ray_adaptive.plan.lowered` -- :class:`LoweredPlan`: the scoring programs, State replicas, costs;
* :mod:`~ray_adaptive.plan.roles` -- what each role (selector, schedulers) runs;
* :mod:`~ray_adaptive.plan.scoring` -- the Score split and how schedulers score with it;
* :mod:`~ray_adaptive.plan.replicas` -- replicated State: deltas and merging;
* :mod:`~ray_adaptive.plan.queue` -- the pending queue;
* :mod:`~ray_adaptive.plan.scheduler` -- one scheduler: queue + program + State + node view;
* :mod:`~ray_adaptive.plan.holding` -- who holds a full cluster's tasks: the scheduler or Ray's queue;
* :mod:`~ray_adaptive.plan.room` -- the cluster model's room rule (a node's slots, and whether it takes one more).

Example:
    >>> from ray_adaptive.plan import Plan, LoadView
    >>> Plan("decentralized+power-of-2", "decentralized", load=LoadView.sample(2)).approximations
    ('power-of-2',)
"""

from ray_adaptive.plan.kinds import Architecture, LoadKind, Merge, Role, SyncKind
from ray_adaptive.plan.lowered import LoweredPlan, RoleCosts
from ray_adaptive.plan.plans import LoadView, Plan, Sync
from ray_adaptive.plan.queue import PendingQueue
from ray_adaptive.plan.roles import RoleSpec, lease_spec, role_specs
from ray_adaptive.plan.scheduler import POOL, NodeState, Scheduler, TaskState
from ray_adaptive.plan.scoring import ScoreSplit

__all__ = [
    "Architecture", "Role", "LoadKind", "SyncKind", "Merge",
    "Plan", "LoadView", "Sync", "LoweredPlan", "RoleCosts",
    "RoleSpec", "role_specs", "lease_spec", "ScoreSplit", "PendingQueue",
    "Scheduler", "NodeState", "TaskState", "POOL",
]
