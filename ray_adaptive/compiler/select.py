"""Which plan to run for ``ra.start(policy, plan=...)``, and why.

``plan`` may be:

* ``"auto"`` -- the compiler's choice for this cluster (its node count,
  executors and queue) at ``rate`` tasks/s of the compiler's default
  workload for the policy (without a rate: at the cluster's execution bound
  under that workload, where the plans differ most);
* an architecture, ``"centralized"`` / ``"decentralized"`` / ``"hybrid"`` --
  that architecture's plan with the fewest approximations, except that a
  decentralized plan syncs State periodically when the State allows it
  (a store round trip per decision would put an actor back in the launch
  path, which is what decentralizing avoids);
* the name of any plan the compiler enumerates (``"hybrid+power-of-2"``);
* a plan file (``ray-adaptive compile --json`` output: its choice), as a
  path or as the parsed dict, or one plan entry of such a file;
* a :class:`~ray_adaptive.plan.Plan` the compiler made for this policy (an
  estimate table's: the adaptive controller's choice), taken as it is.

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> plan, why = select_plan(load_policy("drf_lb"), "decentralized", nodes=4, executors=1, queue=2)
    >>> plan.name, why
    ('decentralized+sync 100ms', 'the decentralized plan with the fewest approximations')
    >>> select_plan(load_policy("drf_lb"), "decentralized", cluster=[0, 4, 4, 2])[0].k(3)  # (the 0-CPU head left out)
    3
"""

from __future__ import annotations

import json
import os
from typing import Mapping, Optional, Sequence, Tuple

from ray_adaptive.compiler.analysis import Analysis, analyze
from ray_adaptive.compiler.cluster import cluster_shape
from ray_adaptive.compiler.enumeration import enumerate_plans
from ray_adaptive.dsl.ir import Policy
from ray_adaptive.files import read_text
from ray_adaptive.plan import Architecture, Plan, SyncKind

__all__ = ["select_plan"]


def _from_file(policy: Policy, d: Mapping) -> Plan:
    if "choice" in d:
        if d.get("policy") not in (None, policy.name):
            raise ValueError(f"the plan file is for policy {d.get('policy')!r}, not {policy.name!r}")
        d = d["choice"]
    return Plan.from_dict(d)


def select_plan(policy: Policy, plan, *, nodes: int = 0, executors: int = 1, queue: int = 2,
                rate: Optional[float] = None, profile=None, analysis: Optional[Analysis] = None,
                cluster: Optional[Sequence] = None) -> Tuple[Plan, str]:
    """The plan to run and why (one line); ``profile``: the latency model ``"auto"`` compiles with;
    ``analysis``: the policy's, if the caller has it already. The cluster: ``nodes`` x ``executors``
    (each with ``queue``), or ``cluster``, the nodes one by one (see :mod:`ray_adaptive.compiler.cluster`:
    each its executors, or a node record; nodes with 0 executors run nothing and are left out)."""
    shape = cluster_shape(nodes, executors, queue, cluster)
    if shape.nodes < 1:
        raise ValueError(f"select_plan needs a cluster: nodes >= 1 (found {nodes}) or cluster=[...]")
    nodes = shape.nodes
    if isinstance(plan, Plan):
        return plan, "given as a plan"
    if isinstance(plan, Mapping):
        return _from_file(policy, plan), "given as a plan dict"
    if not isinstance(plan, str) or not plan:
        raise TypeError(f"plan must be 'auto', an architecture, a plan name, a plan file path or a dict; got {plan!r}")
    if plan == "adaptive":  # (ra.start's plan="adaptive" is the controller, handled before a plan is selected)
        raise ValueError("'adaptive' is not a plan but the controller that switches between plans as the load "
                         "changes: start it with ra.start(policy, plan='adaptive'); a switch (rt.switch) takes one "
                         "plan: 'auto', an architecture, a plan name or a plan file")
    if plan == "auto":
        from ray_adaptive.compiler.pipeline import compile_policy

        given = rate is not None
        if not given:  # where the choice matters most: the cluster's execution bound under the default workload
            from ray_adaptive.workload.generate import PAPER_DURATION

            rate = shape.total_executors / PAPER_DURATION
        c = compile_policy(policy, rate=rate, nodes=nodes, executors=executors, queue=queue, workers=1,
                           profile=profile, cluster=None if cluster is None else [
                               {"executors": e, "queue": q} for e, q in zip(shape.executors, shape.queues)])
        at = f"{c.rate:.0f} tasks/s" if given else f"{c.rate:.0f} tasks/s (no rate given: the execution bound)"
        return c.choice.estimate.plan, f"compiler's choice at {at}: {c.choice.why}"
    if plan.endswith(".json") or os.path.sep in plan:
        if not os.path.exists(plan):
            raise FileNotFoundError(f"plan file {plan!r} does not exist")
        try:
            data = json.loads(read_text(plan, "plan"))  # (a FileError names the path and the cause)
        except (json.JSONDecodeError, RecursionError) as err:
            raise ValueError(f"{plan}: not a plan file (invalid JSON: {err})") from None
        if not isinstance(data, Mapping):
            raise ValueError(f"{plan}: not a plan file: expected a JSON object, found {type(data).__name__}")
        return _from_file(policy, data), f"from {plan}"
    plans, excluded = enumerate_plans(analysis or analyze(policy), nodes)
    if plan in {a.value for a in Architecture}:
        mine = [p for p in plans if p.architecture == plan]
        if not mine:
            why = "; ".join(x.why for x in excluded if x.architecture == plan) or "no such plan"
            raise ValueError(f"policy {policy.name!r} has no {plan} plan: {why}")
        best = min(mine, key=lambda p: (p.architecture is Architecture.DECENTRALIZED and p.sync.kind is SyncKind.INSTANT,
                                        len(p.approximations)))
        return best, f"the {plan} plan with the fewest approximations"
    for p in plans:
        if p.name == plan:
            return p, "named"
    # (an architecture's plan with no approximation has the architecture's name: listed once)
    names = ", ".join(dict.fromkeys(["auto", *(a.value for a in Architecture), *(p.name for p in plans)]))
    raise ValueError(f"unknown plan {plan!r} for policy {policy.name!r}; expected one of: {names}, or a plan file")
