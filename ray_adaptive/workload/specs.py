"""What a workload is made of: nodes and tasks as data (the cluster model's inputs).

The rules these feed (who is a candidate, what ``get_load`` reads, when a
task is dropped) are the cluster model of :mod:`ray_adaptive.sim.model`;
the runtime, the simulator, scenario files and traces all describe nodes
and tasks with these two records.

Example:
    >>> TaskSpec("t0", arrival=1.0, timeout=0.5).deadline
    1.5
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["NodeSpec", "TaskSpec", "DEFAULT_EXECUTORS", "DEFAULT_QUEUE", "DEFAULT_DURATION", "DEFAULT_TIMEOUT",
           "DEADLINES"]

DEFAULT_EXECUTORS = 1
DEFAULT_QUEUE = 2
DEFAULT_DURATION = 0.02  # seconds
DEFAULT_TIMEOUT = math.inf  # never dropped
#: What a task's deadline (arrival + timeout) bounds: its start, or its dispatch (see :mod:`ray_adaptive.sim.model`).
DEADLINES = ("start", "dispatch")


@dataclass(frozen=True)
class NodeSpec:
    id: str
    executors: int = DEFAULT_EXECUTORS
    queue: int = DEFAULT_QUEUE
    resources: dict = field(default_factory=dict)
    fields: dict = field(default_factory=dict)


@dataclass(frozen=True)
class TaskSpec:
    id: str
    arrival: float
    duration: float = DEFAULT_DURATION
    timeout: float = DEFAULT_TIMEOUT
    fields: dict = field(default_factory=dict)
    resources: dict = field(default_factory=dict)
    # who submitted it (a client of a tenant, e.g. "greedy/2"); decentralized plans
    # receive a task at its submitter's home scheduler. The ideal scheduler ignores it.
    submitter: str = ""
    # submitted with .options(preemptible=True): a policy's Preempt may stop it (docs/language.md, Preemption)
    preemptible: bool = False

    @property
    def deadline(self) -> float:
        return self.arrival + self.timeout
