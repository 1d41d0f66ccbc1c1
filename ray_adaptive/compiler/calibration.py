"""Calibrating the host: the profile's message costs and host fields, fitted from measured runs.

On a machine whose cores the schedulers, the submitting processes and Ray's
task path share (a local cluster, a CI runner, a head node running every
scheduler), the knee of a plan is the host's CPU, not its decision
throughput (``docs/benchmarks.md``, scheduler_bound). The model of that
(:func:`~ray_adaptive.compiler.estimates.host_bound`) has the numbers this
module fits from runs on the machine:

* ``host_cores``: the cores busy when the host is saturated, less those busy
  when it is idle and the fixed cost of being busy at all (below);
* ``task_cpu_s``: CPU per task Ray runs, from plain ``@ray.remote`` tasks;
* ``message_s``: CPU per cross-process hop (a selector's answer and finish
  notification), and ``receive_s``, per task a selector receives (placed or
  not: the runs offering more than it places tell the two apart), from runs
  of a plan with a selector;
* ``in_process_s``: CPU per hop of a decentralized scheduler, which runs in
  its submitter's process, from runs of a decentralized plan;
* ``forward_s``: CPU per task of a hybrid's placement hop (forwarded in
  batches), from runs of a hybrid plan -- without one it is left to follow
  ``message_s``.

Every run's busy cores above idle is, in the model, a fixed *active* share
(Ray's processes polling once work flows, whatever the rate: measured, plain
Ray at 200 tasks/s keeps ~0.5 more cores busy than idle, at 1,200 tasks/s
only ~1 more) plus a part linear in the four costs: ``offered x arrival +
placed x (task_cpu_s + the plan's other steps)`` and the schedulers'
periodic work. All five are one least-squares fit over the runs given (plain
Ray at two rates or more pins the active share); a cost no run measures
keeps the base profile's value.

A run *at the host's bound* (placing under ``HOST_BOUND_SHARE`` of what it
was offered) counts as the saturated host's cores, not the cores measured
over it. That is the equation :func:`~ray_adaptive.compiler.estimates.host_bound`
solves when it predicts such a run. Measured, a plan at its bound keeps
0.01-0.05 fewer cores busy than the saturated host (a process waiting on
another's answer), and a fit to those figures predicted its own runs at the
bound up to 10% high (2 ms tasks on 2 cores, the centralized plan).

Example (the figures of one run of ``release_tests/calibrate_host.py`` on a 2-core machine: cores busy
idle 0.06, saturated 1.974; plain Ray at 206 and 1,180 tasks/s, each plan at 300 and 1,178 offered)::

    >>> from ray_adaptive.compiler import analyze, enumerate_plans
    >>> from ray_adaptive.dsl import load_policy
    >>> a = analyze(load_policy("drf_lb"))
    >>> plans = {p.name: p for p in enumerate_plans(a, 4)[0]}
    >>> c, d = plans["centralized"], plans["decentralized+sync 100ms"]
    >>> runs = [HostRun(None, 206, 206, 0.682), HostRun(None, 1178, 1180, 1.873),
    ...         HostRun(c, 300, 308, 1.716), HostRun(c, 1178, 331, 1.951),
    ...         HostRun(d, 300, 300, 1.495), HostRun(d, 1178, 537, 1.993)]
    >>> p, active = fit_host(a, 4, runs, idle_cores=0.06, saturated_cores=1.974)
    >>> round(active, 2), round(p.host_cores, 2)
    (0.45, 1.46)
    >>> [round(getattr(p, k) * 1e3, 2) for k in ("task_cpu_s", "message_s", "receive_s", "in_process_s")]
    [1.15, 1.2, 0.2, 0.49]
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np

from ray_adaptive.compiler.analysis import Analysis
from ray_adaptive.compiler.estimates import estimate_cost, host_costs
from ray_adaptive.compiler.profile import Profile
from ray_adaptive.plan import Plan

__all__ = ["HOST_BOUND_SHARE", "HostRun", "fit_host", "host_cpu"]

HOST_BOUND_SHARE = 0.9

_FITTED = ("message_s", "receive_s", "in_process_s", "task_cpu_s", "forward_s")


@dataclass(frozen=True)
class HostRun:
    """One measured run: its plan (None: plain Ray tasks), tasks/s offered and placed, and the host's cores
    busy over it (all processes: ``/proc/stat``)."""

    plan: Optional[Plan]
    offered: float
    placed: float
    busy_cores: float

    def __post_init__(self):
        for k in ("offered", "placed", "busy_cores"):
            v = getattr(self, k)
            if not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"HostRun.{k} must be a finite number >= 0, found {v}")


def host_cpu(run: HostRun, analysis: Analysis, profile: Profile, nodes: int) -> float:
    """Cores the model says ``run`` keeps busy above idle under ``profile``."""
    if run.plan is None:
        return run.placed * profile.task_cpu_s
    e = estimate_cost(run.plan, analysis, profile, nodes)
    arrival, per_task, periodic = host_costs(e.steps, e.overhead, run.plan, profile, nodes)
    return run.offered * arrival + run.placed * per_task + periodic


def fit_host(analysis: Analysis, nodes: int, runs: Sequence[HostRun], idle_cores: float, saturated_cores: float,
             base: Optional[Profile] = None) -> Tuple[Profile, float]:
    """``base`` (default :class:`Profile`) with the host fitted to ``runs`` on ``nodes`` nodes, and the
    fitted active share (cores). ``message_s``, ``receive_s``, ``in_process_s``, ``task_cpu_s``,
    ``forward_s`` and the active share by least squares over each run's busy cores above ``idle_cores``
    (each >= 0; a cost no run measures keeps its base value): a run at the host's bound (placed under
    :data:`HOST_BOUND_SHARE` of offered) counts ``saturated_cores``; ``host_cores`` = ``saturated_cores -
    idle_cores - active``."""
    base = base or Profile()
    if not runs:
        raise ValueError("fitting the host needs at least one measured run")
    if not (saturated_cores > idle_cores >= 0):
        raise ValueError(f"the saturated host must be busier than the idle one: saturated_cores={saturated_cores}, "
                         f"idle_cores={idle_cores}")
    zero = dataclasses.replace(base, **{k: 0.0 for k in _FITTED})
    unit = 1e-3  # (the model is linear in each: a millisecond's slope is exact)
    rows, target = [], []
    for r in runs:
        at_zero = host_cpu(r, analysis, zero, nodes)
        rows.append([(host_cpu(r, analysis, dataclasses.replace(zero, **{k: unit}), nodes) - at_zero) / unit
                     for k in _FITTED] + [1.0])
        busy = saturated_cores if r.placed < HOST_BOUND_SHARE * r.offered else r.busy_cores
        target.append(busy - idle_cores - at_zero)
    a, b = np.array(rows), np.array(target)
    names = _FITTED + ("active",)
    fitted = dict(zip(names, (base.message_s, base.arrival_s, base.local_s, base.task_cpu_s, base.forward_s, 0.0)))
    free = [i for i in range(len(names)) if np.any(a[:, i] > 0)]
    while free:  # least squares; one driven below 0 is pinned at 0 and the rest fitted again
        x, *_ = np.linalg.lstsq(a[:, free], b, rcond=None)  # (the others' columns are 0 or pinned at 0)
        if (x >= 0).all():
            fitted.update({names[i]: float(v) for i, v in zip(free, x)})
            break
        worst = free[int(np.argmin(x))]
        fitted[names[worst]] = 0.0
        free.remove(worst)
    active = fitted.pop("active")
    host = saturated_cores - idle_cores - active
    if not host > 0:
        raise ValueError(f"the runs leave no host to share: saturated {saturated_cores} cores, idle {idle_cores}, "
                         f"active share fitted {active:.3f}; measure the saturated host under a heavier load")
    return dataclasses.replace(base, host_cores=host, **fitted), active
