"""ControlLoop: the controller that keeps or switches the plan in force, and the estimates it looks up.

One implementation for the runtime and the simulator (see
:mod:`~ray_adaptive.control.controller`); the estimates come from the compiler,
ahead of time (:func:`ray_adaptive.compiler.estimate_table`).
"""

from ray_adaptive.control.controller import Controller, Measurement, Settings, Verdict
from ray_adaptive.control.table import EstimateTable, PlanEstimate

__all__ = ["Controller", "Measurement", "Settings", "Verdict", "EstimateTable", "PlanEstimate"]
