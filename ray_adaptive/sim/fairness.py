"""Whose fair share a run is judged by: the tenants, and their weights where the policy has weights.

Jain's index over service ratios (goodput / max-min fair share) rewards a
scheduler for serving tenants equally. A policy with weights -- weighted fair
queueing's ``task.weight`` -- asks for service *in proportion* to them; judged
against unweighted shares, a plan that ignores the weights would look fair
and one that honours them unfair. So the shares are weighted max-min shares
(:func:`~ray_adaptive.sim.metrics.max_min_fair_share`) whenever the policy
has weights.

How the weights are found: a Task field is the policy's *weight* when it is
numeric (int or float), Score or a hook reads it, and its name is ``weight``,
``share``, or ends in ``_weight``. A tenant's weight is the mean of its tasks'
values of that field (a tenant's tasks normally all carry one). A policy
without such a field (DRF-LB: equal tenants) is judged by unweighted shares.

Example:
    >>> from types import SimpleNamespace as T
    >>> from ray_adaptive.dsl import load_policy
    >>> tasks = [T(fields={"tenant": "a", "weight": 1.0, "cost": 1.0}), T(fields={"tenant": "b", "weight": 3.0, "cost": 1.0})]
    >>> weight_field(load_policy("weighted_fair")), tenant_weights(load_policy("weighted_fair"), tasks)
    ('weight', {'a': 1.0, 'b': 3.0})
    >>> tenant_weights(load_policy("drf_lb"), tasks) is None
    True
"""

from __future__ import annotations

from typing import Iterable, Optional

from ray_adaptive.dsl import ir

__all__ = ["weight_field", "tenant_weights"]

_NAMES = ("weight", "share")


def weight_field(policy: ir.Policy) -> Optional[str]:
    """The Task field holding the policy's weights (see the module doc), or None."""
    read = set(ir.task_attributes_read(policy.score))
    for h in policy.hooks:
        read |= set(ir.task_attributes_read(h))
    for f in policy.task_fields:
        numeric = f.type.kind in ("int", "float")
        if numeric and f.name in read and (f.name in _NAMES or f.name.endswith("_weight")):
            return f.name
    return None


def tenant_weights(policy: ir.Policy, tasks: Iterable, tenant_field: str = "tenant") -> Optional[dict[str, float]]:
    """Each tenant's weight (the mean of its tasks' weights), or None when the policy has none."""
    name = weight_field(policy)
    if name is None:
        return None
    sums: dict[str, list] = {}
    for t in tasks:
        fields = t.fields
        acc = sums.setdefault(fields.get(tenant_field, ""), [0.0, 0])
        acc[0] += float(fields[name])
        acc[1] += 1
    return {k: s / n for k, (s, n) in sums.items()}
