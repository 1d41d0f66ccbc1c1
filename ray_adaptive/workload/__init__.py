"""The data a run is made of: nodes and tasks, scenario files, traces, and synthetic workloads.

* :mod:`~ray_adaptive.workload.specs` -- :class:`NodeSpec`, :class:`TaskSpec` (the cluster model's inputs);
* :mod:`~ray_adaptive.workload.scenario` -- scenario files (JSON): nodes and tasks, checked against a policy;
* :mod:`~ray_adaptive.workload.trace` -- trace files (CSV / Parquet): what the monitor records and the compiler reads;
* :mod:`~ray_adaptive.workload.generate` -- synthetic workloads (the paper's tenants, Poisson or bursty).

Example:
    >>> from ray_adaptive.workload import scenario_from_dict
    >>> sc = scenario_from_dict({"nodes": [{"id": "n0"}], "tasks": [{"id": "t0", "arrival": 0.0}]})
    >>> sc.nodes[0].queue, sc.tasks[0].duration
    (2, 0.02)
"""

from ray_adaptive.workload.scenario import Scenario, check_fields, load_scenario, scenario_from_dict, scenario_to_dict
from ray_adaptive.workload.specs import NodeSpec, TaskSpec
from ray_adaptive.workload.trace import read_trace, write_trace

__all__ = ["NodeSpec", "TaskSpec", "Scenario", "check_fields", "load_scenario", "scenario_from_dict",
           "scenario_to_dict", "read_trace", "write_trace"]
