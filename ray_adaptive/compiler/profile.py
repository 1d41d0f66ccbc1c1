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
``receive_s``       None      a selector receiving one task from a submitter
                              (None: ``message_s``; on Ray the tasks come in
                              batches, one call each, and cost less)
``in_process_s``    None      a decentralized scheduler receiving, sending or
                              hearing the finish of a task of the process it
                              runs in (None: ``message_s``, the paper's
                              schedulers are processes of their own; the Ray
                              runtime's run in their submitter's process)
``forward_s``       None      a hybrid's placement scheduler receiving, or
                              answering for, one task its selector forwarded,
                              or hearing its finish (None: ``message_s``; the
                              Ray runtime forwards in batches, one call a
                              round, and finishes ride with the next call)
``host_cores``      inf       the cores the schedulers, the submitters and the
                              task path share (inf: the paper's model, the
                              schedulers have cores of their own and nothing
                              else costs them time)
``task_cpu_s``      0         the host's CPU per task run outside the
                              schedulers (Ray: submit, lease, run, return)
==================  ========  =================================================

With a finite ``host_cores`` a plan's throughput is also bounded by the host
(:func:`~ray_adaptive.compiler.estimates.host_bound`): every offered task costs
its first receive, every placed task ``task_cpu_s`` and the rest of its steps.
That is the knee of a cluster whose processes share one machine (a laptop, a
CI runner, a head node running every scheduler): measured, not modelled --
:func:`~ray_adaptive.compiler.calibration.fit_host` fits these fields from runs
on the machine (``docs/compiler.md``, "Calibrating the host").

Example:
    >>> p = Profile()
    >>> round(p.message_s * 3 + p.probe_s * 12, 5)   # a centralized decision, without compute
    0.00252
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Mapping, Optional, Sequence

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
    receive_s: Optional[float] = None
    in_process_s: Optional[float] = None
    forward_s: Optional[float] = None
    host_cores: float = math.inf
    task_cpu_s: float = 0.0

    def __post_init__(self):
        for k in ("message_s", "probe_s", "store_s", "heartbeat_s", "default_unit_s", "task_cpu_s"):
            v = getattr(self, k)
            if not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"Profile.{k} must be a finite number of seconds >= 0, found {v}")
        for k in ("receive_s", "in_process_s", "forward_s"):
            v = getattr(self, k)
            if v is not None and not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"Profile.{k} must be None or a finite number of seconds >= 0, found {v}")
        if not (self.host_cores > 0):
            raise ValueError(f"Profile.host_cores must be > 0 (inf: no shared host), found {self.host_cores}")

    @property
    def local_s(self) -> float:
        """What one hop within a decentralized scheduler's own process costs (``in_process_s``, else a message)."""
        return self.message_s if self.in_process_s is None else self.in_process_s

    @property
    def hop_s(self) -> float:
        """What a hybrid's placement scheduler's hop costs per task (``forward_s``, else a message)."""
        return self.message_s if self.forward_s is None else self.forward_s

    @property
    def arrival_s(self) -> float:
        """What a selector's receiving one task from a submitter costs (``receive_s``, else a message)."""
        return self.message_s if self.receive_s is None else self.receive_s

    def compute(self, unit_ids: Sequence[str]) -> float:
        """Compute time of these units, summed."""
        return sum(self.unit_s.get(u, self.default_unit_s) for u in unit_ids)

    def with_units(self, unit_s: Mapping[str, float]) -> "Profile":
        return replace(self, unit_s=dict(unit_s))

    def as_dict(self) -> dict:
        """Plain values (JSON): the host's fields only when set (a profile without them is the paper's model)."""
        out = {"message_s": self.message_s, "probe_s": self.probe_s, "store_s": self.store_s,
               "heartbeat_s": self.heartbeat_s, "default_unit_s": self.default_unit_s,
               "unit_s": {k: round(v, 9) for k, v in self.unit_s.items()}}
        for k in ("receive_s", "in_process_s", "forward_s"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        if math.isfinite(self.host_cores):
            out.update(host_cores=self.host_cores, task_cpu_s=self.task_cpu_s)
        return out

    @classmethod
    def from_dict(cls, d: Mapping) -> "Profile":
        known = {"message_s", "probe_s", "store_s", "heartbeat_s", "default_unit_s", "unit_s", "receive_s",
                 "in_process_s", "forward_s", "host_cores", "task_cpu_s"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown profile key {unknown[0]!r}; expected: {', '.join(sorted(known))}")
        return cls(**{k: (dict(v) if k == "unit_s" else None if v is None else float(v)) for k, v in d.items()})


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
