"""Plans simulated across arrival rates, the compiler's choice beside them, and the simulator's verdict.

For one :class:`~ray_adaptive.experiments.workload.Experiment` and each
rate, :func:`sweep` simulates the named plans (the *judge*), compiles the
policy on a separate trace of the same workload (what a monitor would have
recorded) and simulates the compiler's choice too. One row per (rate, plan):
simulated goodput, Jain's index over service ratios, the competitive ratio
with its 95% interval; the compiler's estimates for that plan. Any policy:
``ray-adaptive reproduce`` sweeps the paper's three plans of DRF-LB,
``ray-adaptive simulate`` any plan of any policy.

**The judge's run.** ``seconds`` of arrivals; the figures (goodput, JFI,
competitive ratio) are taken after ``warmup``. A run starts from its
plan's steady state, as the compiler's replays do: the slots that plan's
throughput keeps busy (:func:`~ray_adaptive.compiler.estimates.busy_level`;
every slot when it keeps up with an overloaded cluster).

**Within the limit** (the simulator's verdict): a run's competitive ratio,
measured over the whole run, is at most the policy's limit, and its JFI is
at least :func:`jfi_floor` (the lowest JFI when every tenant gets within
1 +- (1 - 1/limit) of its fair share -- weighted by the policy's weights
where it has them). The competitive ratio is the quantity the limit bounds;
JFI is the outcome.

**The simulator's best** (:func:`best_plans`): the highest goodput (within
3%) among runs within the limit (all runs, if none is).
"""

from __future__ import annotations

import math
import os
import time
from typing import Callable, Optional, Sequence

from ray_adaptive.compiler import PlanSpace, Profile, analyze, choose, compile_policy, enumerate_plans, lower
from ray_adaptive.compiler.estimates import Estimate, busy_level, effective_parallelism, estimate_cost
from ray_adaptive.dsl import load_policy
from ray_adaptive.experiments.workload import Experiment
from ray_adaptive.sim.plan_sim import periodic_overload, simulate
from ray_adaptive.workload.scenario import Scenario

__all__ = ["sweep", "sweep_rate", "run_plan", "best_plans", "agreement", "choice_agreement", "jfi_floor", "plan_space",
           "PAPER_PLANS"]

#: The paper's three implementations, as names in the compiler's plan space.
PAPER_PLANS = {"C": "centralized", "D": "decentralized+sync 100ms", "H": "hybrid"}


def jfi_floor(limit: Optional[float], n: int = 2) -> float:
    """The lowest Jain's index of service ratios that all lie within ``1 +- (1 - 1/limit)`` of their fair share.

    JFI = 1 / (1 + variance) for ratios averaging 1, so the bound is
    ``1 / (1 + (1 - 1/limit)**2)``, reached with half the tenants at each
    extreme, whatever their number ``n`` (>= 2).

    Example:
        >>> round(jfi_floor(1.2), 4)
        0.973
    """
    if limit is None or n < 2:
        return 0.0
    return 1.0 / (1.0 + (1.0 - 1.0 / limit) ** 2)


def plan_space(policy_name: str, nodes: int, space: PlanSpace = PlanSpace()):
    """The policy's analysis and every plan the compiler lists for ``nodes`` nodes, by name."""
    a = analyze(load_policy(policy_name))
    plans, _ = enumerate_plans(a, nodes, space)
    return a, {p.name: p for p in plans}


def run_plan(exp: Experiment, rate: float, plan, analysis, profile: Profile, scenario: Scenario, *,
             warmup: float, seed: int = 0, est: Optional[Estimate] = None, until: float = math.inf,
             cr_every: int = 2) -> dict:
    """One judge's run of ``plan`` on ``scenario`` (offered at ``rate``), as a row (see the module doc).

    ``est``: the compiler's estimates for the plan at this rate (its latency model alone otherwise).
    """
    t0 = time.perf_counter()
    limit = exp.quality_limit()
    tenants = len(exp.shares)
    if est is None:
        est = estimate_cost(plan, analysis, profile, exp.nodes, effective_parallelism(plan, scenario, exp.nodes))
    lowered = lower(plan, analysis, profile, exp.nodes)
    row = {"experiment": exp.name, "rate": rate, "plan": plan.name, "architecture": plan.architecture.value,
           "paper_plan": next((k for k, v in PAPER_PLANS.items() if v == plan.name), "")
           if exp.policy in ("drf_lb", "drf_lb_paper") else "",
           "throughput_est": round(est.throughput, 2), "latency_est_ms": round(est.latency_s * 1e3, 4),
           "cr_est": est.competitive_ratio, "cr_est_ci_hi": est.interval[1],
           "goodput_est": round(min(rate, est.throughput, exp.capacity), 2), "capacity": round(exp.capacity, 2),
           "jfi_floor": round(jfi_floor(limit, tenants), 4)}
    why = periodic_overload(lowered)
    if why:  # it cannot run: nothing is served
        return {**row, "offered": rate, "goodput": 0.0, "on_time": 0.0, "dropped": None, "jfi": 0.0,
                "cr_sim": math.nan, "cr_sim_ci_hi": math.nan, "cr_sim_p90": math.nan, "within_limit_sim": False,
                "cannot_run": why, "events": 0, "sim_s": 0.0}
    r = simulate(lowered, scenario, seed=seed, warmup=warmup, cr_from=warmup, cr_every=cr_every,
                 prefill=busy_level(rate, est.throughput, exp.capacity), until=until)
    m = r.metrics()
    return {
        **row, "offered": m.offered, "goodput": m.goodput, "on_time": m.on_time, "dropped": m.dropped,
        "jfi": m.jfi, "cr_sim": m.cr["mean"], "cr_sim_ci_hi": m.cr["ci"][1], "cr_sim_p90": m.cr["p90"],
        "within_limit_sim": bool(m.cr["mean"] <= (limit or math.inf) and m.jfi >= jfi_floor(limit, tenants)),
        "cannot_run": "",
        "wait_p99_ms": round(m.wait_p99 * 1e3, 3), "response_p99_ms": round(m.response_p99 * 1e3, 3),
        "utilisation": max(m.utilisation.values()) if m.utilisation else 0.0,
        "events": r.events, "sim_s": round(time.perf_counter() - t0, 4),
        **{f"service_{k}": v for k, v in m.service.items()},
    }


def sweep(
    exp: Experiment,
    rates: Sequence[float],
    seconds: float = 3.0,
    warmup: float = 0.5,
    plans: Optional[Sequence[str]] = None,
    profile: Optional[Profile] = None,
    window: int = 600,
    seed: int = 0,
    compile_choice: bool = True,
    progress: Optional[Callable[[str], None]] = None,
    workers: Optional[int] = None,
    max_window: int = 30_000,
) -> list[dict]:
    """Simulate ``plans`` (default: the paper's three) at every rate; compile, and simulate the choice.

    One row per (rate, plan) run (see the module doc); ``chosen``: the
    compiler's choice among all plans; ``chosen_among_paper``: among the
    paper's three (DRF-LB). ``progress`` is called once per finished run.
    Rates run in ``workers`` processes (default: one per CPU); every run is
    seeded, so the rows are the same whatever the number.
    """
    _, space = plan_space(exp.policy, exp.nodes)
    names = list(plans) if plans is not None else list(PAPER_PLANS.values())
    for n in names:
        if n not in space:
            raise ValueError(f"no plan {n!r} for {exp.policy}; plans: {', '.join(space)}")
    args = [(exp, rate, seconds, warmup, names, profile or Profile(), window, seed, compile_choice, max_window)
            for rate in rates]
    workers = min(workers or os.cpu_count() or 1, len(args))
    rows: list[dict] = []
    if workers <= 1:
        for a in args:
            rows += sweep_rate(*a, progress=progress)
        return rows
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(sweep_rate, *a) for a in args]
        for f in futures:  # in rate order
            part = f.result()
            rows += part
            for r in part:
                if progress:
                    progress(f"{r['rate']:g}/s {r['plan']}")
    return rows


def trace_seconds(rate: float, window: int, max_window: int = 30_000, timeout: float = 1.0) -> float:
    """How long a trace to compile on: enough for the compiler's longest window -- near the execution
    bound a task ``timeout`` of warm-up and three sampled (:func:`~ray_adaptive.compiler.window.window_size`),
    elsewhere several sync periods or ``window`` tasks -- with a second to spare."""
    near_bound = 4 * timeout + 1.0 if math.isfinite(timeout) else 3.0
    return max(near_bound, 1.5 * min(window, max_window) / rate)


def sweep_rate(exp: Experiment, rate: float, seconds: float, warmup: float, names: list, profile: Profile,
               window: int, seed: int, compile_choice: bool, max_window: int = 30_000,
               progress: Optional[Callable[[str], None]] = None, with_estimates: bool = False):
    """The runs of one rate of :func:`sweep` (with ``with_estimates``: and the compiler's estimates)."""
    policy = load_policy(exp.policy)
    analysis, space = plan_space(exp.policy, exp.nodes)
    sc = exp.workload(rate, seconds, seed=seed)
    comp = None
    if compile_choice:
        trace = exp.workload(rate, trace_seconds(rate, window, max_window, exp.timeout), seed=seed + 1).tasks  # as a monitor records it
        comp = compile_policy(policy, rate=rate, trace=trace, nodes=exp.nodes, executors=exp.executors,
                              queue=exp.queue, profile=profile, measure=False, window=window, max_window=max_window,
                              limit=exp.limit, seed=seed, workers=1, replay="all")
    chosen = comp.choice.estimate.plan.name if comp else None
    paper_choice = None
    if comp and all(n in space for n in PAPER_PLANS.values()):
        paper_choice = choose([comp.estimate(n) for n in PAPER_PLANS.values()], comp.rate, comp.limit,
                              comp.headroom).estimate.plan.name
    run = names + ([chosen] if chosen and chosen not in names else [])
    rows: list[dict] = []
    for name in run:
        row = run_plan(exp, rate, space[name], analysis, profile, sc, warmup=warmup, seed=seed,
                       est=comp.estimate(name) if comp else None)
        row.update(chosen=name == chosen, chosen_among_paper=name == paper_choice)
        rows.append(row)
        if progress:
            progress(f"{rate:g}/s {name}")
    return (rows, comp.estimates if comp else []) if with_estimates else rows


def best_plans(rows: Sequence[dict], tol: float = 0.03) -> dict[float, list[str]]:
    """Per rate: the simulator's best plans -- the highest goodput (within ``tol``) among runs within the limit."""
    out: dict[float, list[str]] = {}
    for rate in sorted({r["rate"] for r in rows}):
        runs = [r for r in rows if r["rate"] == rate]
        ok = [r for r in runs if r["within_limit_sim"]] or runs
        top = max(r["goodput"] for r in ok)
        out[rate] = [r["plan"] for r in ok if r["goodput"] >= top * (1 - tol)]
    return out


def agreement(exp: Experiment, rates: Sequence[float], seconds: float = 2.0, warmup: float = 0.4,
              profile: Optional[Profile] = None, window: int = 600, seed: int = 0, tol: float = 0.03,
              progress: Optional[Callable[[str], None]] = None, workers: Optional[int] = None,
              max_window: int = 30_000) -> tuple[list[dict], list[dict]]:
    """Simulate *every* plan at every rate, compile, and compare the choice with the simulator's best.

    Returns (rows, per-rate agreement; see :func:`choice_agreement`).
    """
    _, space = plan_space(exp.policy, exp.nodes)
    rows = sweep(exp, rates, seconds, warmup, plans=list(space), profile=profile, window=window, seed=seed,
                 progress=progress, workers=workers, max_window=max_window)
    return rows, choice_agreement(rows, tol)


def choice_agreement(rows: Sequence[dict], tol: float = 0.03) -> list[dict]:
    """Per rate: the compiler's choice vs the simulator's best plans (rows must cover every plan).

    ``agrees``: the choice is among the best (goodput within ``tol`` of the
    best run within the limit, and itself within the limit). ``agrees_jfi``:
    the same with "within the limit" judged by JFI alone.
    """
    out = []
    best = best_plans(rows, tol)
    for rate, names in best.items():
        runs = {r["plan"]: r for r in rows if r["rate"] == rate}
        chosen = next(r for r in runs.values() if r["chosen"])
        jfi_ok = [r for r in runs.values() if r["jfi"] >= r.get("jfi_floor", 0.0)]
        top_jfi = max(r["goodput"] for r in jfi_ok) if jfi_ok else 0.0
        out.append({
            "rate": rate, "chosen": chosen["plan"], "best": names,
            "agrees": chosen["plan"] in names,
            "agrees_jfi": chosen["jfi"] >= chosen.get("jfi_floor", 0.0) and chosen["goodput"] >= top_jfi * (1 - tol),
            "chosen_goodput": chosen["goodput"], "best_goodput": max(runs[n]["goodput"] for n in names),
        })
    return out
