"""The compiler: a policy's IR -> execution units -> plans -> estimates -> choice.

One module per stage, each a set of pure functions over plain dataclasses:

1. :mod:`~ray_adaptive.compiler.units`, :mod:`~ray_adaptive.compiler.separability`
   -- units, their sides, State merge rules; whether Score splits (:func:`analyze` runs both);
2. :mod:`~ray_adaptive.compiler.enumeration`     -- the plans the IR allows (and why others are not);
3. :mod:`~ray_adaptive.compiler.costs`, :mod:`~ray_adaptive.compiler.estimates` -- the latency
   model (inputs in :mod:`~ray_adaptive.compiler.profile`), throughput, and the competitive
   ratio from replaying a window under each plan's :mod:`~ray_adaptive.compiler.lowering`;
4. :mod:`~ray_adaptive.compiler.choice`    -- the chosen plan, with a reason for every plan.

:func:`compile_policy` (:mod:`~ray_adaptive.compiler.pipeline`) runs them in
order; :func:`select_plan` (:mod:`~ray_adaptive.compiler.select`) turns
``ra.start(plan=...)`` into a plan.

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> from ray_adaptive.compiler import compile_policy
    >>> result = compile_policy(load_policy("drf_lb"), rate=100, window=100, measure=False)
    >>> result.choice.estimate.plan.architecture.value
    'centralized'
"""

from ray_adaptive.compiler.analysis import Analysis, analyze
from ray_adaptive.compiler.choice import Choice, Verdict, choose
from ray_adaptive.compiler.costs import Step
from ray_adaptive.compiler.estimates import Estimate, estimate_cost, estimate_quality
from ray_adaptive.compiler.lowering import lower
from ray_adaptive.compiler.pipeline import Compilation, compile_policy, workload_window
from ray_adaptive.compiler.enumeration import Excluded, Plan, PlanSpace, enumerate_plans
from ray_adaptive.compiler.profile import Profile, measure_units
from ray_adaptive.compiler.select import select_plan
from ray_adaptive.compiler.separability import Separability, score_split
from ray_adaptive.compiler.grid import estimate_table
from ray_adaptive.compiler.units import Access, StateUpdate, StateVar, Unit

__all__ = [
    "analyze", "Analysis", "Access", "Unit", "StateUpdate", "StateVar", "Separability",
    "enumerate_plans", "PlanSpace", "Plan", "Excluded",
    "Profile", "measure_units", "estimate_cost", "estimate_quality", "lower", "Estimate", "Step",
    "choose", "Choice", "Verdict",
    "compile_policy", "Compilation", "workload_window", "select_plan", "score_split", "estimate_table",
]
