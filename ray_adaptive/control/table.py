"""The compiler's estimates over a grid of loads: what the controller looks up instead of compiling.

An evaluation of the adaptive controller must be cheap (it runs every few
seconds beside the submission path), so the compiler's estimates are
computed ahead, for the cluster at hand, over a grid of offered rates and
burstiness (:func:`ray_adaptive.compiler.estimate_table`), and refreshed when
the measured task durations or the cluster change. One evaluation is then a
lookup of the nearest grid point: every plan's estimated goodput,
throughput, competitive ratio (with the upper end of its confidence
interval) and latency, and the compiler's choice there.

Example:
    >>> from ray_adaptive.plan import Plan
    >>> c, d = Plan("centralized", "centralized"), Plan("decentralized", "decentralized")
    >>> cell = lambda tp_c, tp_d: {"centralized": PlanEstimate(tp_c, 1.0, 1.0, 2e-3),
    ...                            "decentralized": PlanEstimate(tp_d, 1.5, 1.6, 1e-3)}
    >>> table = EstimateTable("p", 1.2, 12, 500.0, (100.0, 400.0), (1.0,), (c, d),
    ...                       {(0, 0): cell(400, 900), (1, 0): cell(400, 900)},
    ...                       {(0, 0): "centralized", (1, 0): "centralized"})
    >>> row, choice = table.at(350.0, 1.2)
    >>> choice, row["centralized"].goodput(350.0, table.capacity)
    ('centralized', 350.0)
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Tuple

from ray_adaptive.plan import Plan

__all__ = ["PlanEstimate", "EstimateTable"]


@dataclass(frozen=True)
class PlanEstimate:
    """One plan's estimates at one load: the compiler's figures, with the quality's confidence bound."""

    throughput: float  # tasks/s its schedulers can decide
    ratio: float  # estimated competitive ratio (mean)
    ratio_high: float  # the upper end of the ratio's confidence interval (the ratio itself if unknown)
    latency_s: float  # scheduler time per task: what the plan costs to run
    periodic: float = 0.0  # cores its heartbeat rounds and state syncs keep busy, whatever the load

    def cost_s(self, rate: float) -> float:
        """Scheduler seconds per task when ``rate`` tasks/s are offered: the per-task latency plus the
        periodic work shared by those tasks -- a plan that syncs every 100 ms costs more per task at
        150 tasks/s than at 1,000."""
        return self.latency_s + (self.periodic / rate if rate > 0 else (math.inf if self.periodic > 0 else 0.0))

    def goodput(self, rate: float, capacity: float) -> float:
        """Tasks/s this plan delivers when ``rate`` is offered: the least of the offer, what its
        schedulers decide and what the cluster executes."""
        return min(rate, self.throughput, capacity)

    def within(self, limit: Optional[float]) -> bool:
        return limit is None or self.ratio_high <= limit

    def as_dict(self) -> dict:
        return {"throughput": round(self.throughput, 1), "ratio": round(self.ratio, 4),
                "ratio_high": round(self.ratio_high, 4), "latency_s": round(self.latency_s, 7),
                "periodic": round(self.periodic, 4)}


@dataclass(frozen=True)
class EstimateTable:
    """Estimates of every plan at each (rate, burstiness) of a grid, and the compiler's choice there.

    ``rates`` ascend (tasks/s); ``burstiness`` ascend (the squared coefficient
    of variation of inter-arrival gaps: 1 for Poisson); ``cells[(i, j)]``
    maps a plan name to its :class:`PlanEstimate` at ``(rates[i],
    burstiness[j])`` and ``choice[(i, j)]`` names the compiler's choice.
    ``basis`` says what the grid was computed for (durations, cluster: its
    ``nodes`` and ``total_executors``), so the runtime knows when to refresh
    it -- the durations drifted, or the cluster changed size (:meth:`fits`).
    """

    policy: str
    limit: Optional[float]
    nodes: int
    capacity: float  # the cluster's execution bound, tasks/s
    rates: Tuple[float, ...]
    burstiness: Tuple[float, ...]
    plans: Tuple[Plan, ...]
    cells: Mapping[Tuple[int, int], Mapping[str, PlanEstimate]]
    choice: Mapping[Tuple[int, int], str]
    basis: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self):
        if not self.rates or not self.burstiness:
            raise ValueError("an estimate table needs at least one rate and one burstiness")
        if list(self.rates) != sorted(self.rates) or list(self.burstiness) != sorted(self.burstiness):
            raise ValueError("the grid's rates and burstiness must ascend")
        missing = [(i, j) for i in range(len(self.rates)) for j in range(len(self.burstiness))
                   if (i, j) not in self.cells or (i, j) not in self.choice]
        if missing:
            raise ValueError(f"the grid has no estimates at {missing[:3]}")

    @property
    def executors(self) -> Optional[int]:
        """The executors of the cluster it was computed for, summed over its nodes (None: not recorded)."""
        b = self.basis
        if "total_executors" in b:
            return int(b["total_executors"])
        return int(round(b["executors"] * self.nodes)) if "executors" in b else None

    def fits(self, nodes: Optional[int], executors: Optional[int] = None) -> bool:
        """Whether it was computed for a cluster of ``nodes`` nodes with ``executors`` executors in all
        (None: not measured, taken as fitting; executors not recorded: the node count decides)."""
        if nodes is not None and nodes != self.nodes:
            return False
        mine = self.executors
        return executors is None or mine is None or executors == mine

    def plan(self, name: str) -> Plan:
        for p in self.plans:
            if p.name == name:
                return p
        raise KeyError(f"no plan named {name!r} in the table; plans: {', '.join(p.name for p in self.plans)}")

    def _nearest(self, values: Tuple[float, ...], x: float, log: bool) -> int:
        """Index of the grid value nearest ``x`` (in log scale for rates: 2x off is as far either way)."""
        if not math.isfinite(x):
            return len(values) - 1 if x > 0 else 0
        key = (lambda v: math.log(max(v, 1e-12))) if log else (lambda v: v)
        i = bisect.bisect_left(values, x)
        near = [k for k in (i - 1, i) if 0 <= k < len(values)]
        return min(near, key=lambda k: abs(key(values[k]) - key(max(x, 1e-12) if log else x)))

    def at(self, rate: float, burstiness: float = 1.0) -> Tuple[Dict[str, PlanEstimate], str]:
        """Every plan's estimates at the grid point nearest (``rate``, ``burstiness``), and the choice there."""
        i = self._nearest(self.rates, rate, log=True)
        j = self._nearest(self.burstiness, burstiness if burstiness is not None else 1.0, log=False)
        return dict(self.cells[(i, j)]), self.choice[(i, j)]
