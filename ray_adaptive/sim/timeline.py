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

import bisect
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


class _Index:
    """What :func:`epoch_of` reads of a run, found in time proportional to an epoch's tasks: arrivals by
    bisection, finishes among the tasks still live (arrived, neither finished nor dropped). Scanning
    every task for every epoch made a 3,600 s run of 144,000 tasks (7,200 epochs) take hours."""

    def __init__(self, tasks):
        self.tasks = sorted(tasks, key=lambda t: t.arrival)
        self.arrivals = [t.arrival for t in self.tasks]
        self.live: list = []  # arrived, not finished before the last epoch's end, not dropped
        self.admitted = 0  # tasks (in arrival order) moved to live so far

    def arrived(self, start: float, end: float) -> list:
        return self.tasks[bisect.bisect_left(self.arrivals, start):bisect.bisect_left(self.arrivals, end)]

    def finished(self, start: float, end: float) -> list:
        """The tasks finished in [start, end); those that finished earlier leave the live set unseen
        (epochs are asked for in order: an earlier one counted them)."""
        upto = bisect.bisect_left(self.arrivals, end)
        if upto > self.admitted:
            self.live += self.tasks[self.admitted:upto]
            self.admitted = upto
        done, live = [], []
        for t in self.live:
            if t.status == "finished" and t.finished_at < end:
                if t.finished_at >= start:
                    done.append(t)
            elif t.status != "dropped":
                live.append(t)
        self.live = live
        return done


def epoch_of(sim, start: float, end: float, tenant_field: str = "tenant", index: Optional[_Index] = None) -> Epoch:
    """The figures of [``start``, ``end``) of a run (advanced at least to ``end``); ``index``: the one
    :func:`run_epochs` keeps over the run's epochs, in order (None: one made for this epoch alone)."""
    span = end - start
    index = index if index is not None else _Index(sim.tasks)
    arrived = index.arrived(start, end)
    done = index.finished(start, end)
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
    ratio = sim.ratio  # (samples are taken in time order: the epoch's are a slice)
    lo, hi = bisect.bisect_left(ratio.times, start), bisect.bisect_left(ratio.times, end)
    cr = math.nan
    if hi > lo:
        impl, ideal = np.asarray(ratio.impl[lo:hi]), np.asarray(ratio.ideal[lo:hi])
        cr = float(M.decision_ratios(impl, ideal, M.score_scale(ideal)).mean())
    return Epoch(start, end, sim.plan.name, round(len(arrived) / span, 3), round(len(done) / span, 3),
                 sum(t.status == "dropped" for t in arrived), round(M.jain_index(list(ratios.values())), 4),
                 round(cr, 4), hi - lo)


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
    index = _Index(sim.tasks)
    t = 0.0
    while t < end - 1e-12:
        nxt = min(t + every, end)
        sim.advance(nxt)
        e = epoch_of(sim, t, nxt, index=index)
        out.append(e)
        if on_epoch is not None:
            on_epoch(e, sim)
        t = nxt
    return out
