"""What a plan simulation gives: every task, every scheduler's work, and the figures over a window.

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> from ray_adaptive.compiler import analyze, enumerate_plans, lower
    >>> from ray_adaptive.sim import simulate
    >>> from ray_adaptive.workload.generate import paper_workload
    >>> analysis = analyze(load_policy("drf_lb"))
    >>> plan = lower(enumerate_plans(analysis, 12)[0][0], analysis)   # centralized, no latencies
    >>> m = simulate(plan, paper_workload(300, seconds=1.0)).metrics()
    >>> m.goodput > 250, m.jfi > 0.9
    (True, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

import numpy as np

from ray_adaptive.plan import LoweredPlan, Role
from ray_adaptive.sim import metrics as M
from ray_adaptive.sim.fairness import tenant_weights
from ray_adaptive.sim.model import Task

__all__ = ["SchedulerStats", "Metrics", "SimResult"]


@dataclass(frozen=True)
class SchedulerStats:
    """What one scheduler did: busy time, messages received, decision attempts and their outcomes."""

    name: str
    role: Role
    busy_s: float
    received: int
    attempts: int
    failed: int  # attempts that found no node with room in the scheduler's view
    bounces: int  # decisions refused by a node that had filled up meanwhile
    decisions: int  # tasks sent (dispatched, or forwarded by the hybrid's selector)


@dataclass(frozen=True)
class Metrics:
    """A run's figures over the measurement window (warm-up to the last arrival).

    ``goodput``: tasks completed inside the window / its length. The
    overload control admits a task when it starts before its deadline
    (``arrival + timeout``) and drops it otherwise; an admitted task runs to
    completion and counts. (``on_time`` counts only tasks that also
    *finished* by the deadline: under sustained overload a FIFO-within-tenant
    backlog is always nearly a timeout old, so its tasks start just in time
    and finish just late, and that figure collapses for every scheduler, the
    ideal one included -- see docs/language.md, the cluster model.)
    ``offered``, ``dropped``, ``late``, ``tasks``: of the tasks that arrived
    inside it. ``service``: per tenant,
    goodput / its max-min fair share of the total goodput (demands =
    offered rates; shares weighted by the policy's weights where it has
    them, see :mod:`ray_adaptive.sim.fairness`); ``jfi``: Jain's index over
    the service ratios.
    ``response_p50/p99``: arrival to finish of completed tasks; ``wait_p50/p99``:
    arrival to dispatch. ``utilisation``: busy fraction of the selector
    (centralized, hybrid), the busiest decentralized scheduler, and their
    mean over the schedulers that received work.
    ``cr``: the competitive ratio summary (:func:`~ray_adaptive.sim.metrics.competitive_ratio`).
    ``preemptions``, ``wasted_s``: victims stopped and the seconds of their runs cut short (a policy with
    Preempt, :mod:`ray_adaptive.sim.plan_preemption`); the ratio samples ordinary decisions only.
    """

    offered: float
    goodput: float
    on_time: float
    dropped: int
    late: int
    tasks: int
    service: dict
    jfi: float
    response_p50: float
    response_p99: float
    wait_p50: float
    wait_p99: float
    utilisation: dict
    bounces: int
    cr: dict
    preemptions: int = 0  # victims stopped (of the tasks that arrived inside the window)
    wasted_s: float = 0.0  # seconds of their runs the preemptions cut short

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class SimResult:
    """The outcome of :func:`simulate`: every task, every scheduler, the competitive-ratio samples."""

    plan: LoweredPlan
    tasks: list[Task]
    schedulers: list[SchedulerStats]
    cr_impl: np.ndarray
    cr_ideal: np.ndarray
    window: tuple[float, float]
    placed_by: dict = field(default_factory=dict, repr=False)  # task id -> scheduler name
    events: int = 0
    cr_times: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)  # when each sample was taken

    @property
    def batch_s(self) -> float:
        """The length of the batches the ratio's interval is taken over: half the plan's longest period,
        and at least an eighth of the time sampled (see :mod:`ray_adaptive.sim.metrics`)."""
        span = float(self.cr_times[-1] - self.cr_times[0]) if len(self.cr_times) > 1 else 0.0
        return max(max(self.plan.sync.period_s, self.plan.load.period_s) / 2, span / 8)

    def metrics(self, tenant_field: str = "tenant", cr_scale: Optional[float] = None,
                weights: "Optional[Mapping[str, float]] | str" = "policy") -> Metrics:
        """Goodput, drops, fairness, latency, utilisation and competitive ratio over the window.

        ``weights``: each tenant's weight for its fair share -- ``"policy"`` (default): the policy's
        own, if it has any (:mod:`ray_adaptive.sim.fairness`); None: equal shares.
        """
        lo, hi = self.window
        span = hi - lo
        inside = [t for t in self.tasks if lo <= t.arrival < hi]
        # goodput: completions inside the window (a backlog drained after the last
        # arrival does not count); demand: arrivals inside the window
        done = [t for t in self.tasks if t.status == "finished" and lo <= t.finished_at < hi]
        on_time = [t for t in done if t.on_time]
        tenant = (lambda t: t.fields.get(tenant_field, "")) if tenant_field else (lambda t: "")
        demand: dict[str, float] = {}
        served: dict[str, float] = {}
        for t in inside:
            demand[tenant(t)] = demand.get(tenant(t), 0.0) + 1.0 / span
        for t in done:
            served[tenant(t)] = served.get(tenant(t), 0.0) + 1.0 / span
        goodput = len(done) / span if span > 0 else 0.0
        if weights == "policy":
            weights = tenant_weights(self.plan.policy, [t for t in self.tasks if t.spec.arrival >= 0], tenant_field) \
                if tenant_field else None
        ratios = M.service_ratios(served, demand, goodput, weights)
        resp = np.array([t.finished_at - t.arrival for t in done]) if done else np.zeros(1)
        waits = np.array([t.dispatched_at - t.arrival for t in inside if t.dispatched_at is not None])
        waits = waits if waits.size else np.zeros(1)
        sel = [s for s in self.schedulers if s.role is Role.SELECTOR]
        loc = [s for s in self.schedulers if s.role is Role.SCHEDULERS]
        end = max(hi, max((t.finished_at or 0.0 for t in self.tasks), default=hi))
        util = {}
        if sel:
            util["selector"] = round(sel[0].busy_s / end, 4) if end > 0 else 0.0
        if loc:
            util["schedulers_max"] = round(max(s.busy_s for s in loc) / end, 4) if end > 0 else 0.0
            util["schedulers_mean"] = round(sum(s.busy_s for s in loc) / len(loc) / end, 4) if end > 0 else 0.0
        return Metrics(
            offered=round(len(inside) / span, 3) if span > 0 else 0.0,
            goodput=round(goodput, 3),
            on_time=round(len(on_time) / span, 3) if span > 0 else 0.0,
            dropped=sum(t.status == "dropped" for t in inside),
            late=sum(t.status == "finished" and not t.on_time for t in inside),
            tasks=len(inside),
            service={k: round(v, 4) for k, v in sorted(ratios.items())},
            jfi=round(M.jain_index(list(ratios.values())), 4),
            response_p50=round(float(np.percentile(resp, 50)), 6),
            response_p99=round(float(np.percentile(resp, 99)), 6),
            wait_p50=round(float(np.percentile(waits, 50)), 6),
            wait_p99=round(float(np.percentile(waits, 99)), 6),
            utilisation=util,
            bounces=sum(s.bounces for s in self.schedulers),
            cr=M.competitive_ratio(self.cr_impl, self.cr_ideal, scale=cr_scale, times=self.cr_times,
                                   batch_s=self.batch_s),
            preemptions=sum(t.preemptions for t in inside),
            wasted_s=round(sum(t.wasted_s for t in inside), 6),
        )
