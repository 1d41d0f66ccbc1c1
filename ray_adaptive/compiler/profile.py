"""The latency model's inputs: modelled communication costs and measured unit compute.

A plan's latency is the sum of the latencies of the units a task passes
through (paper, Section 5.2). Compute units are *measured* by running each
on the interpreter over a representative batch (microseconds). Everything
that crosses a process boundary is *modelled* with the parameters below;
the runtime's measured round trips are not fed back (see docs/compiler.md). The defaults put the
knees where the paper measured them (12 nodes: centralized ~400 tasks/s,
hybrid ~450-470 tasks/s, execution bound ~510 tasks/s):

==================  ========  =================================================
parameter           default   meaning
==================  ========  =================================================
``message_s``       0.7 ms    a scheduler receiving or sending one task, or
                              handling one finish notification (Ray: a
                              synchronous actor call runs ~1,350/s, ~0.74 ms)
``probe_s``         35 us     one ``get_load(node)`` probe: scanning 12 nodes
                              costs 0.42 ms. The paper's knees say load
                              balancing is ~11% of the selector's per-task
                              time (400 vs 450 tasks/s): messages dominate
``store_s``         0.35 ms   one read or write of the shared State store
``heartbeat_s``     35 us     handling one node's load report
==================  ========  =================================================

Example:
    >>> p = Profile()
    >>> round(p.message_s * 3 + p.probe_s * 12, 5)   # a centralized decision, without compute
    0.00252
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from ray_adaptive.compiler.analysis import Analysis
from ray_adaptive.dsl.interp import Interpreter

__all__ = ["Profile", "measure_units"]


@dataclass(frozen=True)
class Profile:
    """Modelled costs (seconds) and the measured compute of each execution unit.

    ``unit_s`` maps a unit id to its compute per decision (Score units) or per
    hook run (hook units); a unit missing from it costs ``default_unit_s``
    (so a profile with an empty ``unit_s`` is a fixed, machine-independent
    model -- what tests use).
    """

    message_s: float = 0.7e-3
    probe_s: float = 35e-6
    store_s: float = 0.35e-3
    heartbeat_s: float = 35e-6
    default_unit_s: float = 10e-6
    unit_s: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self):
        for k in ("message_s", "probe_s", "store_s", "heartbeat_s", "default_unit_s"):
            v = getattr(self, k)
            if not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"Profile.{k} must be a finite number of seconds >= 0, found {v}")

    def compute(self, unit_ids: Sequence[str]) -> float:
        """Compute time of these units, summed."""
        return sum(self.unit_s.get(u, self.default_unit_s) for u in unit_ids)

    def with_units(self, unit_s: Mapping[str, float]) -> "Profile":
        return replace(self, unit_s=dict(unit_s))

    def as_dict(self) -> dict:
        return {"message_s": self.message_s, "probe_s": self.probe_s, "store_s": self.store_s,
                "heartbeat_s": self.heartbeat_s, "default_unit_s": self.default_unit_s,
                "unit_s": {k: round(v, 9) for k, v in self.unit_s.items()}}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Profile":
        known = {"message_s", "probe_s", "store_s", "heartbeat_s", "default_unit_s", "unit_s"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown profile key {unknown[0]!r}; expected: {', '.join(sorted(known))}")
        return cls(**{k: (dict(v) if k == "unit_s" else float(v)) for k, v in d.items()})


def _time(fn, repeats: int = 3, number: int = 30) -> float:
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def measure_units(analysis: Analysis, tasks: Sequence, nodes: Sequence, number: int = 30) -> dict[str, float]:
    """Compute time of every unit, measured on the interpreter (seconds, best of 3 x ``number`` runs).

    Score units run over ``tasks`` x ``nodes`` (a decision's batch: the
    distinct tasks it scores against every candidate node), in order, each
    with the locals the earlier ones assigned; hook units run for one task
    and one node on a scratch copy of State.
    """
    policy = analysis.policy
    if not tasks or not nodes:
        raise ValueError("measuring units needs at least one task and one node")
    out: dict[str, float] = {}
    it = Interpreter(policy, num_nodes=len(nodes))
    local_values: dict = {}
    for u in analysis.score_units:
        run = it.statements([u.stmt])
        before = dict(local_values)
        out[u.id] = _time(lambda: run(tasks, nodes, 0.0, before), number=number)
        local_values = run(tasks, nodes, 0.0, before)
    scratch = Interpreter(policy, num_nodes=len(nodes))
    hook_locals: dict[str, dict] = {}
    for u in analysis.hook_units:
        run = scratch.statements([u.stmt])
        node = [nodes[0]] if u.function != "OnArrival" else []
        before = dict(hook_locals.get(u.function, {}))
        out[u.id] = _time(lambda: run(tasks[:1], node, 0.0, before), number=number)
        hook_locals[u.function] = run(tasks[:1], node, 0.0, before)
    return out
