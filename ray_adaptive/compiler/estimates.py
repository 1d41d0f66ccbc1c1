"""Stage 3 of the compiler: latency, throughput and decision quality of each plan.

**Latency** (paper, Section 5.2) is the sum of the latencies of the units a
task passes through, per the latency model of :mod:`~ray_adaptive.compiler.costs`.

**Throughput** = ``min(1 / sum(U_c), k / sum(U_d))`` over the selector's
units U_c and the decentralized (or placement) schedulers' units U_d, each
side scaled by the share of its time left over by periodic work (heartbeat
rounds, state syncs). ``k`` is the effective number of decentralized
schedulers: tasks enter at their submitter's home scheduler, so the busiest
home decides (``1 / max share``); the hybrid's selector spreads evenly.

**Quality** is the competitive ratio from replaying a window of the trace
under the plan (:mod:`ray_adaptive.sim.plan_sim`): at each decision,
``Score_ideal(t_impl, n_impl)`` against the ideal decision on the exact
global state, aggregated as the mean (see
:func:`ray_adaptive.sim.metrics.competitive_ratio`). When the trace offers
more than the cluster can execute, the replay starts from the steady state
of an overloaded cluster (every slot busy), so a short window shows the
contention a long run would.

The simulator charges exactly these latencies as scheduler busy time, so
estimated throughput and simulated goodput agree where a scheduler is the
bottleneck; quality comes from the replay, not from a formula.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from ray_adaptive.compiler.costs import Step, role_costs
from ray_adaptive.compiler.lowering import lower
from ray_adaptive.compiler.parallel import run_jobs
from ray_adaptive.compiler.profile import Profile
from ray_adaptive.compiler.analysis import Analysis
from ray_adaptive.dsl import ir
from ray_adaptive.plan import Architecture, LoadKind, Plan, Role
from ray_adaptive.sim import metrics as M
from ray_adaptive.sim.plan_sim import simulate
from ray_adaptive.workload.scenario import Scenario

__all__ = ["Step", "Estimate", "estimate_cost", "estimate_quality", "effective_parallelism", "ideal_scale"]


@dataclass(frozen=True)
class Estimate:
    """A plan's three estimates and how they were obtained."""

    plan: Plan
    steps: tuple[Step, ...]
    latency_s: float  # sum of every step: the paper's plan latency
    selector_s: float  # sum(U_c): selector time per task (0: no selector)
    scheduler_s: float  # sum(U_d): one decentralized/placement scheduler's time per task (0: none)
    overhead: dict  # busy fraction of periodic work per role
    parallelism: float  # effective k
    throughput: float  # tasks/s the schedulers can decide
    competitive_ratio: float = float("nan")
    quality: dict = field(default_factory=dict)  # p90, n, the replay's goodput and JFI, ...

    def as_dict(self) -> dict:
        return {
            "name": self.plan.name, "architecture": self.plan.architecture.value,
            "approximations": list(self.plan.approximations),
            "latency_s": round(self.latency_s, 7), "throughput": round(self.throughput, 1),
            "competitive_ratio": round(self.competitive_ratio, 4),
            "selector_s": round(self.selector_s, 7), "scheduler_s": round(self.scheduler_s, 7),
            "parallelism": round(self.parallelism, 2), "overhead": self.overhead,
            "steps": [s.as_dict() for s in self.steps], "quality": self.quality,
        }


def effective_parallelism(plan: Plan, scenario: Scenario, nodes: int) -> float:
    """k for the throughput formula: ``1 / max share`` of tasks entering one scheduler (decentralized)."""
    k = plan.k(nodes)
    if plan.architecture is not Architecture.DECENTRALIZED or not scenario.tasks:
        return float(k)
    homes: dict[str, int] = {}
    count = np.zeros(k)
    rr = 0
    for t in sorted(scenario.tasks, key=lambda t: (t.arrival, t.id)):
        if t.submitter:
            home = homes.setdefault(t.submitter, len(homes) % k)
        else:
            home, rr = rr % k, rr + 1
        count[home] += 1
    return float(count.sum() / count.max())


def estimate_cost(plan: Plan, analysis: Analysis, profile: Profile, nodes: int, parallelism: Optional[float] = None) -> Estimate:
    """Latency and throughput of ``plan`` (quality is filled in by :func:`estimate_quality`)."""
    steps: list[Step] = []
    sel = loc = 0.0
    overhead: dict[str, float] = {}
    tp = []
    k = float(parallelism if parallelism is not None else plan.k(nodes))
    if plan.architecture is not Architecture.DECENTRALIZED:
        _, s, o = role_costs(analysis, profile, plan, nodes, Role.SELECTOR)
        steps += s
        sel = sum(x.seconds for x in s)
        overhead[Role.SELECTOR.value] = round(o, 4)
        tp.append((1 - o) / sel if sel > 0 else float("inf"))
    if plan.architecture is not Architecture.CENTRALIZED:
        _, s, o = role_costs(analysis, profile, plan, nodes, Role.SCHEDULERS)
        steps += s
        loc = sum(x.seconds for x in s)
        overhead[Role.SCHEDULERS.value] = round(o, 4)
        tp.append(k * (1 - o) / loc if loc > 0 else float("inf"))
    return Estimate(plan, tuple(steps), sel + loc, sel, loc, overhead, k, min(tp))


def ideal_scale(policy: ir.Policy, window: Scenario) -> float:
    """The yardstick of the competitive ratio: the median |score| of the ideal scheduler's decisions on ``window``.

    The same for every plan (see :func:`ray_adaptive.sim.metrics.competitive_ratio`).
    """
    from ray_adaptive.sim.replay import replay

    return M.score_scale([d.score for d in replay(policy, window, deadline="dispatch").decisions])


def _replay(args) -> dict:
    """One plan's replay, reduced to what its estimates need (runs in a worker process when the compiler fans out).

    The score scale is applied by :func:`_summarise`, so replays need not wait for :func:`ideal_scale`.
    """
    sim_plan, window, seed, prefill, cr_from, settle, arch = args
    # (the window's fields were checked against the policy once, by workload_window)
    r = simulate(sim_plan, window, seed=seed, prefill=prefill, cr_from=cr_from, settle=settle, validate=False)
    mt = r.metrics()
    role = Role.SELECTOR if arch is not Architecture.DECENTRALIZED else Role.SCHEDULERS
    decided = sum(s.decisions for s in r.schedulers if s.role == role)
    attempts = sum(s.attempts for s in r.schedulers if s.role == role)
    return {"cr_impl": r.cr_impl, "cr_ideal": r.cr_ideal, "replay_goodput": mt.goodput, "replay_jfi": mt.jfi,
            "bounces": mt.bounces, "attempts_per_decision": round(attempts / decided, 3) if decided else None}


def _summarise(raw: dict, scale: float, limit: Optional[float]) -> dict:
    cr = M.competitive_ratio(raw["cr_impl"], raw["cr_ideal"], scale=scale, limit=limit)
    return {"cr": cr, "quality": {
        "p90": cr["p90"], "above_limit": cr["above_limit"], "decisions": cr["n"], "scale": cr["scale"],
        "replay_goodput": raw["replay_goodput"], "replay_jfi": raw["replay_jfi"], "bounces": raw["bounces"],
        "attempts_per_decision": raw["attempts_per_decision"]}}


def _expected_cost(job) -> float:
    """Relative wall time of a job (measured on DRF-LB), to hand out the longest first: the ideal replay
    for the score scale runs the whole window where a plan's stops once settled, so it goes first
    rather than straggle at the end."""
    kind, payload = job
    if kind == "scale":
        return 4.0
    plan, arch = payload[0], payload[-1]
    return (2.0 if arch is Architecture.DECENTRALIZED else 1.0) * (1.5 if plan.load.kind is LoadKind.CACHED else 1.0)


def _job(job):
    kind, payload = job
    return ideal_scale(*payload) if kind == "scale" else _replay(payload)


def estimate_quality(estimates: Sequence[Estimate], analysis: Analysis, profile: Profile, window: Scenario,
                     seed: int = 0, prefill: bool = False, limit: Optional[float] = None,
                     scale: Optional[float] = None, warm: float = 1 / 3, workers: int = 1,
                     settle: bool = True) -> list[Estimate]:
    """Replay ``window`` under every plan; fill in the competitive ratio (one score scale for all plans).

    The first ``warm`` share of the window (by arrivals) brings each plan to
    its own steady state (its backlogs, its State); decisions after it are
    sampled (``window`` carries the policy's fields: :func:`~ray_adaptive.compiler.pipeline.workload_window`
    checked them). With ``settle``, a plan's replay stops once its mean ratio is
    settled against ``limit`` (:class:`~ray_adaptive.sim.metrics.Settle`: at
    least 100 decisions; far from the limit, about a third of the window).
    ``workers`` > 1 replays in that many processes (the same result).
    """
    nodes = len(window.nodes)
    cr_from = window.tasks[int(len(window.tasks) * warm)].arrival if window.tasks and warm > 0 else 0.0
    rule = M.Settle(limit) if settle else None
    jobs = [("replay", (lower(e.plan, analysis, profile, nodes), window, seed, prefill, cr_from, rule,
                        e.plan.architecture)) for e in estimates]
    if scale is None:  # the ideal replay runs beside the plans'
        jobs.insert(0, ("scale", (analysis.policy, window)))
    raw = run_jobs(jobs, workers, _job, _expected_cost)
    if scale is None:
        scale, raw = raw[0], raw[1:]
    results = [_summarise(r, scale, limit) for r in raw]
    return [dataclasses.replace(e, competitive_ratio=r["cr"]["mean"], quality=r["quality"])
            for e, r in zip(estimates, results)]
