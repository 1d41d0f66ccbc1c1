"""Stage 3 of the compiler: latency, throughput and decision quality of each plan.

**Latency** (paper, Section 5.2) is the sum of the latencies of the units a
task passes through, per the latency model of :mod:`~ray_adaptive.compiler.costs`.

**Throughput** = ``min(1 / sum(U_c), k / sum(U_d))`` over the selector's
units U_c and the decentralized (or placement) schedulers' units U_d, each
side scaled by the share of its time left over by periodic work (heartbeat
rounds, state syncs). ``k`` is the effective number of decentralized
schedulers: tasks enter at their submitter's home scheduler, so the busiest
home decides (``1 / max share``); the hybrid's selector spreads evenly.

**The host** (when the profile has one, :attr:`Profile.host_cores` finite):
the schedulers, the submitters and the task path share the host's cores,
so the throughput is also at most :func:`host_bound` at the offered rate --
the knee of a cluster run on one machine, where the plan's decision
throughput is never reached. Above that knee every plan delivers its bound in
time: a selector drops what its delivery slack says would arrive late
(:mod:`ray_adaptive.runtime.delivery`), and a decentralized plan's process
offered more than its share of the host serves its backlog newest first
(:mod:`ray_adaptive.plan.queue`), so what it places has its deadline ahead.

**Quality** is the competitive ratio from replaying a window of the trace
under the plan (:mod:`ray_adaptive.sim.plan_sim`): at each decision,
``Score_ideal(t_impl, n_impl)`` against the ideal decision on the exact
global state, aggregated as the mean, with its 95% interval over batches of
decisions (see :func:`ray_adaptive.sim.metrics.competitive_ratio`). The
window is long enough for what the plan hides to show
(:mod:`~ray_adaptive.compiler.window`): several of its sync and heartbeat
periods after a warm-up that is not sampled. When the trace offers more than
the cluster can execute, the replay starts from the steady state of an
overloaded cluster (every slot busy) and warms up for a task timeout, so the
backlogs are those of a long run; a plan that cannot decide as fast as the
nodes execute starts with the slots its throughput keeps busy
(:func:`busy_level`). The yardstick of the ratio (where the ideal score is
near 0) is the plan's own typical ideal score: the simulator's judgement of a
whole run uses the same rule. A plan whose heartbeat rounds alone take longer
than their period cannot run, and is not replayed.

The simulator charges exactly these latencies as scheduler busy time, so
estimated throughput and simulated goodput agree where a scheduler is the
bottleneck; quality comes from the replay, not from a formula.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from ray_adaptive.compiler.costs import Step, role_costs
from ray_adaptive.compiler.lowering import lower
from ray_adaptive.compiler.parallel import run_jobs
from ray_adaptive.compiler.enumeration import PlanSpace, enumerate_plans
from ray_adaptive.compiler.profile import Profile
from ray_adaptive.compiler.analysis import Analysis
from ray_adaptive.compiler.window import WindowSize, plan_periods
from ray_adaptive.plan import Architecture, LoadKind, LoweredPlan, Plan, Role
from ray_adaptive.sim import metrics as M
from ray_adaptive.sim.plan_sim import periodic_overload, simulate
from ray_adaptive.workload.scenario import Scenario

__all__ = ["Step", "Estimate", "estimate_cost", "host_bound", "host_costs", "periodic_cores", "estimate_quality",
           "effective_parallelism", "home_shares", "ideal_plan", "busy_level", "SKIPPED"]


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
    quality: dict = field(default_factory=dict)  # ci, p90, n, the replay's goodput and JFI, ...
    host_bound: float = math.inf  # tasks/s the shared host can place at the rate estimated for (inf: no host)

    @property
    def interval(self) -> tuple[float, float]:
        """The competitive ratio's 95% interval ((nan, nan) before a replay)."""
        ci = self.quality.get("ci")
        return (float(ci[0]), float(ci[1])) if ci else (math.nan, math.nan)

    @property
    def cannot_run(self) -> str:
        """Why the plan cannot run at all ("" if it can)."""
        return self.quality.get("cannot_run", "")

    def as_dict(self) -> dict:
        return {
            "name": self.plan.name, "architecture": self.plan.architecture.value,
            "approximations": list(self.plan.approximations),
            "latency_s": round(self.latency_s, 7), "throughput": round(self.throughput, 1),
            "competitive_ratio": round(self.competitive_ratio, 4),
            "selector_s": round(self.selector_s, 7), "scheduler_s": round(self.scheduler_s, 7),
            "parallelism": round(self.parallelism, 2), "overhead": self.overhead,
            "steps": [s.as_dict() for s in self.steps], "quality": self.quality,
            **({"host_bound": round(self.host_bound, 1)} if math.isfinite(self.host_bound) else {}),
        }


def home_shares(plan: Plan, scenario: Scenario, nodes: int, cache: Optional[dict] = None) -> tuple[float, ...]:
    """The share of the tasks entering each of a decentralized plan's schedulers (a submitter's tasks enter
    its home; tasks without one go round robin), ascending; () for the other architectures. ``cache``: a
    dict kept across the plans of one scenario (the shares depend on k alone)."""
    k = plan.k(nodes)
    if plan.architecture is not Architecture.DECENTRALIZED or not scenario.tasks:
        return ()
    if cache is not None and k in cache:
        return cache[k]
    homes: dict[str, int] = {}
    count = [0] * k
    rr = 0
    for t in sorted(scenario.tasks, key=lambda t: (t.arrival, t.id)):
        if t.submitter:
            home = homes.get(t.submitter)
            if home is None:
                home = homes[t.submitter] = len(homes) % k
        else:
            home, rr = rr % k, rr + 1
        count[home] += 1
    out = tuple(sorted(c / sum(count) for c in count))
    if cache is not None:
        cache[k] = out
    return out


def effective_parallelism(plan: Plan, scenario: Scenario, nodes: int, cache: Optional[dict] = None) -> float:
    """k for the throughput formula: ``1 / max share`` of tasks entering one scheduler (decentralized,
    :func:`home_shares`). ``cache``: as there."""
    shares = home_shares(plan, scenario, nodes, cache)
    return 1.0 / shares[-1] if shares else float(plan.k(nodes))


def host_costs(steps: Sequence[Step], overhead: dict, plan: Plan, profile: Profile,
               nodes: int) -> tuple[float, float, float]:
    """What a plan costs a shared host: (CPU s per offered task, CPU s per placed task, cores of periodic
    work). Per offered task: a selector's plan's first step (the selector receiving it, placed or not);
    per placed task: ``profile.task_cpu_s`` and the plan's other steps; periodic: each scheduler's
    heartbeat and sync share. A decentralized plan's first step is per placed task: its scheduler is in
    the submitting process, where ``.submit()`` only queues the task and one it never decides expires in
    bulk at its group's head (measured: placed 313 and 316 a second at 600 and 1,200 offered, the host
    saturated at both; priced per offered, the estimate fell 23% between them)."""
    arrival = steps[0].seconds if steps and plan.architecture is not Architecture.DECENTRALIZED else 0.0
    return arrival, profile.task_cpu_s + sum(s.seconds for s in steps) - arrival, periodic_cores(overhead, plan, nodes)


def periodic_cores(overhead: dict, plan: Plan, nodes: int) -> float:
    """Cores a plan keeps busy with periodic work (heartbeat rounds, state syncs) whatever the load: each
    role's busy fraction (:attr:`Estimate.overhead`) times its schedulers (one selector, ``plan.k`` others)."""
    counts = {Role.SELECTOR.value: 1, Role.SCHEDULERS.value: plan.k(nodes)}
    return sum(counts[r] * o for r, o in overhead.items())


def host_bound(steps: Sequence[Step], overhead: dict, plan: Plan, profile: Profile, nodes: int,
               rate: Optional[float] = None) -> float:
    """Tasks/s a host of ``profile.host_cores`` can place under ``plan`` when ``rate`` tasks/s are offered
    (None: as many as it places), every process of the plan on it (:func:`host_costs`)::

        (host_cores - periodic work - rate x per offered task) / per placed task

    inf without a host."""
    if not math.isfinite(profile.host_cores):
        return math.inf
    arrival, per_task, periodic = host_costs(steps, overhead, plan, profile, nodes)
    free = profile.host_cores - periodic
    if rate is None or not math.isfinite(rate):  # (as many offered as placed)
        per_task += arrival
    else:
        free -= rate * arrival
    if per_task <= 0:
        return math.inf
    return max(0.0, free) / per_task


def estimate_cost(plan: Plan, analysis: Analysis, profile: Profile, nodes: int, parallelism: Optional[float] = None,
                  rate: Optional[float] = None) -> Estimate:
    """Latency and throughput of ``plan`` (quality is filled in by :func:`estimate_quality`); ``rate``:
    the offered tasks/s, for the host's bound (:func:`host_bound`; a profile without a host ignores it)."""
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
        tp.append(max(0.0, 1 - o) / sel if sel > 0 else float("inf"))
    if plan.architecture is not Architecture.CENTRALIZED:
        _, s, o = role_costs(analysis, profile, plan, nodes, Role.SCHEDULERS)
        steps += s
        loc = sum(x.seconds for x in s)
        overhead[Role.SCHEDULERS.value] = round(o, 4)
        tp.append(k * max(0.0, 1 - o) / loc if loc > 0 else float("inf"))
    host = host_bound(steps, overhead, plan, profile, nodes, rate)
    return Estimate(plan, tuple(steps), sel + loc, sel, loc, overhead, k, min(tp + [host]), host_bound=host)


def ideal_plan(analysis: Analysis) -> LoweredPlan:
    """The ideal scheduler as a plan: centralized, exact, deciding in no time."""
    plans, _ = enumerate_plans(analysis, 1, PlanSpace(architectures=(Architecture.CENTRALIZED,), sample_d=(),
                                                      heartbeat_s=()))
    return lower(plans[0], analysis)


def _end(window: Scenario) -> float:
    return max((t.arrival for t in window.tasks), default=0.0) + 1e-9


#: Why a plan's ratio was not estimated (see ``deciding`` in :func:`estimate_quality`).
SKIPPED = "not replayed: its competitive ratio cannot change the choice"


def _replay(args) -> dict:
    """One plan's replay, reduced to what its estimates need (runs in a worker process when the compiler fans out).

    The yardstick is applied by :func:`_summarise`.
    """
    sim_plan, window, seed, prefill, cr_from, settle, (short_s, batch_s), arch = args
    # (the window's fields were checked against the policy once, by workload_window)
    end = _end(window)
    r = simulate(sim_plan, window, seed=seed, prefill=prefill, cr_from=cr_from, settle=settle, validate=False,
                 until=end)
    if r.window[1] < end:  # stopped early, above the limit: on the batches that said so (see WindowSize.batch_s)
        batch_s = short_s
    mt = r.metrics()
    role = Role.SELECTOR if arch is not Architecture.DECENTRALIZED else Role.SCHEDULERS
    decided = sum(s.decisions for s in r.schedulers if s.role == role)
    attempts = sum(s.attempts for s in r.schedulers if s.role == role)
    return {"cr_impl": r.cr_impl, "cr_ideal": r.cr_ideal, "cr_times": r.cr_times, "batch_s": batch_s,
            "replay_goodput": mt.goodput, "replay_jfi": mt.jfi, "bounces": mt.bounces, "events": r.events,
            "replayed_s": round(r.window[1], 4),
            "attempts_per_decision": round(attempts / decided, 3) if decided else None}


def _summarise(raw: dict, scale: Optional[float], limit: Optional[float], widen: float = 1.0) -> dict:
    cr = M.competitive_ratio(raw["cr_impl"], raw["cr_ideal"], scale=scale, limit=limit, times=raw["cr_times"],
                             batch_s=raw["batch_s"], widen=widen)
    return {"cr": cr, "quality": {
        "ci": cr["ci"], "p90": cr["p90"], "above_limit": cr["above_limit"], "decisions": cr["n"],
        "scale": cr["scale"], "replayed_s": raw["replayed_s"], "events": raw["events"],
        "replay_goodput": raw["replay_goodput"], "replay_jfi": raw["replay_jfi"], "bounces": raw["bounces"],
        "attempts_per_decision": raw["attempts_per_decision"]}}


def _expected_cost(payload) -> float:
    """Relative wall time of a replay, to hand out the longest first: decentralized replays make the most
    events (measured on DRF-LB), cached views refresh."""
    plan, arch = payload[0], payload[-1]
    return (2.0 if arch is Architecture.DECENTRALIZED else 1.0) * (1.5 if plan.load.kind is LoadKind.CACHED else 1.0)


def busy_level(rate: Optional[float], throughput: float, capacity: Optional[float]) -> float:
    """The share of the cluster busy in the steady state of a plan carrying ``throughput`` at ``rate`` on
    nodes executing ``capacity`` tasks/s (1: every slot, queues too; see
    :mod:`ray_adaptive.sim.prefill`)."""
    if not rate or not capacity:
        return 0.0
    level = min(rate, throughput) / capacity
    return 1.0 if level >= 1 else level


def estimate_quality(estimates: Sequence[Estimate], analysis: Analysis, profile: Profile, window: Scenario,
                     seed: int = 0, prefill: "bool | float" = False, limit: Optional[float] = None,
                     scale: Optional[float] = None, warm: "float | WindowSize" = 1 / 3, workers: int = 1,
                     settle: bool = True, rate: Optional[float] = None,
                     capacity: Optional[float] = None,
                     deciding: Optional[Callable[[list], list]] = None) -> list[Estimate]:
    """Replay ``window`` under every plan; fill in the competitive ratio (``scale``: one yardstick for all
    plans; default: each plan's own, see :func:`~ray_adaptive.sim.metrics.competitive_ratio`).

    ``warm``: the warm-up, not sampled -- a :class:`~ray_adaptive.compiler.window.WindowSize`, or a
    share of the window by arrivals -- brings each plan to its own steady state (its backlogs, its
    State); decisions after it are sampled (``window`` carries the policy's fields:
    :func:`~ray_adaptive.compiler.pipeline.workload_window` checked them). With ``settle``, a plan's
    replay stops once its mean ratio is settled above ``limit``
    (:class:`~ray_adaptive.sim.metrics.Settle`): a plan within or near the limit is replayed to the
    window's end. ``workers`` > 1 replays in that many processes (the same result).
    Each replay starts from its plan's steady state: with ``rate`` and ``capacity`` (the cluster's
    execution bound), the slots its throughput keeps busy (:func:`busy_level`); else ``prefill``.
    ``deciding``: replay only the plans this names, given the estimates so far, until it names none
    (:func:`~ray_adaptive.compiler.choice.undecided`: the plans whose ratio can still change the
    choice), each as soon as a process is free; the others are marked as skipped (:data:`SKIPPED`).
    """
    nodes = len(window.nodes)
    if isinstance(warm, WindowSize):
        cr_from, size = warm.warm_s, warm
    else:
        cr_from = window.tasks[int(len(window.tasks) * warm)].arrival if window.tasks and warm > 0 else 0.0
        size = WindowSize(cr_from, _end(window) - cr_from, len(window.tasks), "the window")
    jobs: dict[str, tuple] = {}
    current: dict[str, Estimate] = {}
    for e in estimates:
        lowered = lower(e.plan, analysis, profile, nodes)
        why = periodic_overload(lowered)
        if why:
            current[e.plan.name] = dataclasses.replace(e, competitive_ratio=math.nan, quality={"cannot_run": why})
            continue
        current[e.plan.name] = e
        period = plan_periods(e.plan)
        short = size.batch_s(period, backlogs=False)
        rule = M.Settle(limit, batch_s=short) if settle else None
        level = busy_level(rate, e.throughput, capacity) if capacity else prefill
        jobs[e.plan.name] = (lowered, window, seed, level, cr_from, rule, (short, size.batch_s(period)),
                             e.plan.architecture)

    def absorb(done: dict) -> None:  # replays finished: their ratios into the estimates
        for n, r in done.items():
            if "ci" not in current[n].quality:
                got = _summarise(r, scale, limit, size.design_effect)
                current[n] = dataclasses.replace(current[n], competitive_ratio=got["cr"]["mean"], quality=got["quality"])

    def wanted(done: dict) -> list[str]:
        absorb(done)
        if deciding is None:  # every plan, the longest replays first (none straggles at the end)
            return sorted(jobs, key=lambda n: -_expected_cost(jobs[n]))
        return [e.plan.name for e in deciding(list(current.values())) if e.plan.name in jobs]

    absorb(run_jobs(jobs, workers, _replay, wanted))
    for n in jobs:
        if "ci" not in current[n].quality:
            current[n] = dataclasses.replace(current[n], quality={"skipped": SKIPPED})
    return [current[e.plan.name] for e in estimates]
