"""A plan lowered to what its schedulers run: the scoring programs, State replicas, costs.

The compiler lowers a :class:`~ray_adaptive.plan.plans.Plan` (see
:func:`ray_adaptive.compiler.lower`); the simulator runs the result with
simulated time and the runtime with Ray actors and real time, so both
execute the same programs, the same merge rules and the same Score split.

``costs`` are the compiler's latency model (what the simulator charges a
scheduler per message, decision attempt, probe, sync and heartbeat round);
the runtime ignores them. Lowered without a profile, a plan costs nothing.

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> lp = LoweredPlan(Plan("centralized", "centralized"), load_policy("least_loaded"))
    >>> lp.architecture, lp.k(12), lp.central.send_s
    (<Architecture.CENTRALIZED: 'centralized'>, 0, 0.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from ray_adaptive.dsl.ir import Policy
from ray_adaptive.plan.kinds import Architecture
from ray_adaptive.plan.plans import LoadView, Plan, Sync
from ray_adaptive.plan.scoring import ScoreSplit

__all__ = ["RoleCosts", "LoweredPlan"]


@dataclass(frozen=True)
class RoleCosts:
    """Busy seconds charged to one scheduler of a role (the plan's latency model).

    ``recv_s``: per task received (a submission, or a task forwarded by the
    hybrid's selector); ``send_s``: per task sent (to a node, or forwarded);
    ``finish_s``: per finish notification handled (0 when the role keeps no
    State that OnFinish changes and needs no room accounting);
    ``compute_s``: the execution units' compute per decision attempt;
    ``probe_s``: per node probed; ``sync_s``: per periodic sync (push +
    pull); ``heartbeat_s``: per heartbeat round (all nodes' load reports).
    Shared-store accesses of ``instant`` sync are folded into ``compute_s``
    (a read per decision) and the message costs (a write per hook run) by
    the compiler.
    """

    recv_s: float = 0.0
    send_s: float = 0.0
    finish_s: float = 0.0
    compute_s: float = 0.0
    probe_s: float = 0.0
    sync_s: float = 0.0
    heartbeat_s: float = 0.0

    def __post_init__(self):
        for k, v in self.__dict__.items():
            if not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"RoleCosts.{k} must be a finite number of seconds >= 0, found {v}")

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class LoweredPlan:
    """One implementation plan in the form the simulator and the runtime run.

    ``plan`` is what was lowered (its name, architecture, load view, sync
    and k are this object's too). ``policy`` is the full policy (what the
    centralized and decentralized schedulers score with, and what the ideal
    scores with). For ``hybrid``, ``task_policy`` and ``node_policy`` are
    the two scoring programs the compiler split Score into (same State and
    hooks; Score = the task part / the node part). ``local_state``: whether
    the hybrid's placement schedulers keep a replica of State (their node
    part reads State that hooks change). ``merge``: ``(variable, rule)``
    for each State variable hooks change (a :class:`~ray_adaptive.plan.kinds.Merge`),
    which is how replicas merge. ``delta_hooks``: hooks whose effect is a
    fixed ``add`` delta per task (see
    :meth:`ray_adaptive.compiler.units.Analysis.delta_hooks`): the simulator
    computes each delta once per kind of task and then adds it -- the same
    State, a fraction of the work. ``split``: ``policy``'s Score as
    ``op(T(task), N(node))`` (see :func:`ray_adaptive.compiler.score_split`):
    schedulers then score each task group and node once instead of every
    pair -- the same decisions and scores, a fraction of the work;
    ``task_split`` / ``node_split``: the same for the hybrid's two scoring
    programs (one-sided: Score = T, Score = N). ``central`` / ``local``:
    the costs of the selector and of one of the k schedulers.
    """

    plan: Plan
    policy: Policy = field(repr=False)
    central: RoleCosts = RoleCosts()
    local: RoleCosts = RoleCosts()
    task_policy: Optional[Policy] = field(default=None, repr=False)
    node_policy: Optional[Policy] = field(default=None, repr=False)
    local_state: bool = False
    merge: tuple = ()
    delta_hooks: tuple = ()
    split: Optional[ScoreSplit] = None
    task_split: Optional[ScoreSplit] = None
    node_split: Optional[ScoreSplit] = None

    def __post_init__(self):
        if self.architecture is Architecture.HYBRID and (self.task_policy is None or self.node_policy is None):
            raise ValueError("a hybrid plan needs task_policy and node_policy (the two parts of a separable Score)")

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def architecture(self) -> Architecture:
        return self.plan.architecture

    @property
    def load(self) -> LoadView:
        return self.plan.load

    @property
    def sync(self) -> Sync:
        return self.plan.sync

    def k(self, nodes: int) -> int:
        """Decentralized / placement schedulers on a cluster of ``nodes`` (0 for centralized)."""
        return self.plan.k(nodes)
