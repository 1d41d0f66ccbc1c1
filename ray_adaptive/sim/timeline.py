"""A run seen epoch by epoch: offered rate, goodput, fairness and decision quality over time.

:func:`run_epochs` advances a :class:`~ray_adaptive.sim.plan_sim.PlanSim`
one epoch (``every`` simulated seconds) at a time and, after each, hands the
epoch's figures to ``on_epoch`` -- the place where something that watches
the run acts on it. That is how a workload whose rate changes over time
(:mod:`ray_adaptive.workload.rates`) is shown: which plan was in force, what
was offered, what it delivered, how fairly, how close to the ideal.

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> from ray_adaptive.plan import LoweredPlan, Plan
    >>> from ray_adaptive.sim.plan_sim import PlanSim
    >>> from ray_adaptive.workload.generate import paper_workload
    >>> sim = PlanSim(LoweredPlan(Plan("centralized", "centralized"), load_policy("drf_lb")),
    ...               paper_workload(300, seconds=1.0))
    >>> epochs = run_epochs(sim, every=0.25)
    >>> [e.start for e in epochs], all(e.goodput > 200 for e in epochs[1:])
    ([0.0, 0.25, 0.5, 0.75], True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ray_adaptive.sim import metrics as M
from ray_adaptive.sim.fairness import tenant_weights

__all__ = ["Epoch", "run_epochs", "epoch_of"]


@dataclass(frozen=True)
class Epoch:
    """One epoch's figures: [start, end) simulated seconds, under ``plan``."""

    start: float
    end: float
    plan: str
    offered: float  # tasks/s that arrived in the epoch
    goodput: float  # tasks/s that finished in it
    dropped: int
    jfi: float  # over the tenants' service ratios (weighted shares where the policy has weights)
    cr: float  # mean competitive ratio of the epoch's decisions (nan: none sampled)
    decisions: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def epoch_of(sim, start: float, end: float, tenant_field: str = "tenant") -> Epoch:
    """The figures of [``start``, ``end``) of a run (advanced at least to ``end``)."""
    span = end - start
    arrived = [t for t in sim.tasks if start <= t.arrival < end]
    done = [t for t in sim.tasks if t.status == "finished" and start <= t.finished_at < end]
    demand: dict[str, float] = {}
    served: dict[str, float] = {}
    for t in arrived:
        k = t.fields.get(tenant_field, "")
        demand[k] = demand.get(k, 0.0) + 1.0
    for t in done:
        k = t.fields.get(tenant_field, "")
        served[k] = served.get(k, 0.0) + 1.0
    weights = tenant_weights(sim.plan.policy, arrived, tenant_field) if arrived else None
    ratios = M.service_ratios(served, demand, float(len(done)), weights)
    times = np.asarray(sim.ratio.times)
    inside = (times >= start) & (times < end)
    cr = math.nan
    if inside.any():
        impl, ideal = np.asarray(sim.ratio.impl)[inside], np.asarray(sim.ratio.ideal)[inside]
        cr = float(M.decision_ratios(impl, ideal, M.score_scale(ideal)).mean())
    return Epoch(start, end, sim.plan.name, round(len(arrived) / span, 3), round(len(done) / span, 3),
                 sum(t.status == "dropped" for t in arrived), round(M.jain_index(list(ratios.values())), 4),
                 round(cr, 4), int(inside.sum()))


def run_epochs(sim, every: float, until: Optional[float] = None,
               on_epoch: Optional[Callable[[Epoch, object], None]] = None) -> list[Epoch]:
    """Advance ``sim`` epoch by epoch up to ``until`` (default: its last arrival); ``on_epoch(epoch, sim)``
    after each. Returns the epochs.

    An epoch's figures are final once the run has passed its end: tasks that arrive in it and finish
    later count in the epoch they finish in.
    """
    if not every > 0:
        raise ValueError(f"an epoch must last > 0 seconds, found {every}")
    end = sim.window[1] if until is None else until
    out: list[Epoch] = []
    t = 0.0
    while t < end - 1e-12:
        nxt = min(t + every, end)
        sim.advance(nxt)
        e = epoch_of(sim, t, nxt)
        out.append(e)
        if on_epoch is not None:
            on_epoch(e, sim)
        t = nxt
    return out
