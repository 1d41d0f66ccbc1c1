"""The compiler: a policy's IR -> execution units -> plans -> estimates -> choice.

One module per stage, each a set of pure functions over plain dataclasses:

1. :mod:`~ray_adaptive.compiler.units`     -- units, their sides, State merge rules, separability;
2. :mod:`~ray_adaptive.compiler.plans`     -- the plans the IR allows (and why others are not);
3. :mod:`~ray_adaptive.compiler.estimates` -- latency, throughput (the latency model in
   :mod:`~ray_adaptive.compiler.profile`) and competitive ratio (a trace replay);
4. :mod:`~ray_adaptive.compiler.choice`    -- the chosen plan, with a reason for every plan.

:func:`compile_policy` (:mod:`~ray_adaptive.compiler.pipeline`) runs them in order.

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> from ray_adaptive.compiler import compile_policy
    >>> result = compile_policy(load_policy("drf_lb"), rate=100, window=100, measure=False)
    >>> result.choice.estimate.plan.architecture
    'centralized'
"""

from ray_adaptive.compiler.choice import Choice, Verdict, choose
from ray_adaptive.compiler.estimates import Estimate, Step, estimate_cost, estimate_quality, lower
from ray_adaptive.compiler.pipeline import Compilation, compile_policy, workload_window
from ray_adaptive.compiler.plans import Excluded, Plan, PlanSpace, enumerate_plans
from ray_adaptive.compiler.profile import Profile, measure_units
from ray_adaptive.compiler.units import Access, Analysis, Separability, StateUpdate, StateVar, Unit, analyze

__all__ = [
    "analyze", "Analysis", "Access", "Unit", "StateUpdate", "StateVar", "Separability",
    "enumerate_plans", "PlanSpace", "Plan", "Excluded",
    "Profile", "measure_units", "estimate_cost", "estimate_quality", "lower", "Estimate", "Step",
    "choose", "Choice", "Verdict",
    "compile_policy", "Compilation", "workload_window",
]
