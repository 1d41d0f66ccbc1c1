"""Lowering: a plan, in the form the simulator and the runtime run (:class:`~ray_adaptive.plan.LoweredPlan`).

For a hybrid, Score is split into the selector's task part and the
placement schedulers' node part, and the selector keeps only the hook
statements the plan places on it; State variables hooks change get their
merge rules; Scores of the form ``T(task) op N(node)`` get their split.
With a profile, each role also gets its costs (the simulator charges them;
the runtime has real ones).

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> from ray_adaptive.compiler import analyze, enumerate_plans
    >>> analysis = analyze(load_policy("drf_lb"))
    >>> hybrid = next(p for p in enumerate_plans(analysis, nodes=4)[0] if p.name == "hybrid")
    >>> lp = lower(hybrid, analysis)
    >>> lp.task_split.op, lp.node_split.op
    ('task', 'node')
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from ray_adaptive.compiler.costs import role_costs
from ray_adaptive.compiler.profile import Profile
from ray_adaptive.compiler.analysis import Analysis
from ray_adaptive.compiler.separability import score_split
from ray_adaptive.dsl import ir
from ray_adaptive.plan import Architecture, LoweredPlan, Merge, Plan, Role, RoleCosts, SyncKind

__all__ = ["lower"]


def _part_policy(policy: ir.Policy, expr: Optional[ir.Expr], whole: bool = False) -> ir.Policy:
    """``policy`` with Score replaced by ``return expr`` (0 when None), or kept when ``whole``."""
    if whole:
        return policy
    body = (ir.Return(expr if expr is not None else ir.Const(0, ir.INT)),)
    return dataclasses.replace(policy, score=dataclasses.replace(policy.score, body=body))


def _selector_hooks(policy: ir.Policy, plan: Plan) -> ir.Policy:
    """``policy`` with only the hook statements ``plan`` places on the selector: one that reads the node
    (round robin's ``next = node.index + 1``) runs where the node is chosen, on a placement scheduler."""
    where = dict(plan.placement)
    hooks = tuple(dataclasses.replace(h, body=tuple(st for i, st in enumerate(h.body)
                                                    if "selector" in where.get(f"{h.name}.{i + 1}", "selector")))
                  for h in policy.hooks)
    return dataclasses.replace(policy, hooks=hooks)


def lower(plan: Plan, analysis: Analysis, profile: Optional[Profile] = None, nodes: int = 0) -> LoweredPlan:
    """``plan`` as the simulator and the runtime run it; with ``profile``, each role's costs on ``nodes`` nodes
    (what the simulator charges; without, a plan costs nothing: the runtime's use)."""
    policy = analysis.policy
    arch = plan.architecture
    central = local = RoleCosts()
    if profile is not None:
        if arch is not Architecture.DECENTRALIZED:
            central, _, _ = role_costs(analysis, profile, plan, nodes, Role.SELECTOR)
        if arch is not Architecture.CENTRALIZED:
            local, _, _ = role_costs(analysis, profile, plan, nodes, Role.SCHEDULERS)
    task_policy = node_policy = None
    if arch is Architecture.HYBRID:
        sep = analysis.separability
        if not sep.separable:
            raise ValueError(f"plan {plan.name!r} needs a separable Score; policy {policy.name!r}'s is not ({sep.why})")
        if sep.form in ("task-only", "constant"):
            task_policy, node_policy = _part_policy(policy, None, whole=sep.form == "task-only"), _part_policy(policy, None)
        elif sep.form == "node-only":
            task_policy, node_policy = _part_policy(policy, None), policy
        else:
            task_policy, node_policy = _part_policy(policy, sep.task_expr), _part_policy(policy, sep.node_expr)
        task_policy = _selector_hooks(task_policy, plan)
    merge = tuple((v.name, Merge.parse(v.merge if v.merge != "const" else "none")) for v in analysis.state if v.dynamic)
    return LoweredPlan(
        plan=plan, policy=policy, central=central, local=local, task_policy=task_policy, node_policy=node_policy,
        local_state=arch is Architecture.HYBRID and plan.sync.kind is not SyncKind.EXACT, merge=merge,
        delta_hooks=analysis.delta_hooks(), split=score_split(policy),
        task_split=score_split(task_policy) if task_policy else None,
        node_split=score_split(node_policy) if node_policy else None,
    )
