"""The standing check of the compiler's quality estimate: does it hold where the compiler decides?

At each *point* (a workload, a cluster, a rate) every plan the compiler
lists is simulated (the judge, :mod:`ray_adaptive.experiments.sweep`) and the
policy is compiled on a separate trace of the same workload. For the plans
that decide the choice -- the chosen plan and its *runner-up* (what the
compiler would choose without it) -- the estimated competitive ratio (with
its 95% interval) stands beside the simulated one; so does, when it is
neither, the *contender*: the plan that would win were the limit ignored
(for information: it lost on quality). A point passes when

* the chosen plan is within the limit by simulation (or, where no plan is,
  it is the simulator's best), and
* for the chosen plan and the runner-up, the estimate is within ``tol``
  (10%) of the simulated ratio, or above it (conservative);

and the choice *agrees* when it is among the simulator's best plans
(:func:`~ray_adaptive.experiments.sweep.best_plans`).

Points: every workload of the agreement benchmark across the execution
bound, the paper's workload at 50, 200 and 1,000 nodes, and weighted fair
queueing with weights 1:2:3:4 (:data:`WEIGHTED`), whose JFI is against
weighted shares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from ray_adaptive.compiler import Profile, choose
from ray_adaptive.experiments.workload import Experiment

__all__ = ["Point", "WEIGHTED", "scaled_paper", "check_point", "deciding_plans", "format_table", "summary"]

#: Weighted fair queueing, four tenants of equal demand and weights 1:2:3:4 (the JFI is against weighted
#: shares); every task costs the same, so fair service is in tasks; held to a limit of 1.2 as DRF-LB is.
WEIGHTED = Experiment("weighted-4-tenants-12-nodes", policy="weighted_fair",
                      shares=(("a", 1.0), ("b", 1.0), ("c", 1.0), ("d", 1.0)),
                      fields=tuple((t, (("weight", float(w)), ("cost", 1.0))) for t, w in zip("abcd", (1, 2, 3, 4))),
                      limit=1.2)


def scaled_paper(nodes: int) -> Experiment:
    """The paper's workload (three tenants, one greedy at 3x) on ``nodes`` nodes."""
    return Experiment(f"paper-{nodes}-nodes", nodes=nodes)


@dataclass(frozen=True)
class Point:
    """A workload at some rates, judged by runs of ``seconds`` (figures after ``warmup``)."""

    exp: Experiment
    fractions: tuple[float, ...]  # rates as fractions of the execution bound
    seconds: float = 3.0
    warmup: float = 1.0

    def rates(self) -> list[float]:
        return [round(f * self.exp.capacity, 1) for f in self.fractions]


def deciding_plans(estimates: Sequence, rate: float, limit: Optional[float], headroom: float = 0.1) -> dict[str, str]:
    """Role -> plan name: the ``chosen`` plan, the ``runner-up`` (the choice without it), and the ``contender``
    (the choice were the limit ignored), when it is neither."""
    chosen = choose(estimates, rate, limit, headroom).estimate.plan.name
    out = {"chosen": chosen}
    rest = [e for e in estimates if e.plan.name != chosen]
    if rest:
        out["runner-up"] = choose(rest, rate, limit, headroom).estimate.plan.name
    contender = choose(estimates, rate, None, headroom).estimate.plan.name
    if contender not in out.values():
        out["contender"] = contender
    return out


def check_point(exp: Experiment, rate: float, rows: Sequence[dict], agree: dict, limit: Optional[float],
                estimates: Sequence, tol: float = 0.10) -> dict:
    """One point's verdict from the judge's ``rows`` (every plan), the agreement record and the estimates."""
    runs = {r["plan"]: r for r in rows}
    roles = deciding_plans(estimates, rate, limit)
    plans = []
    for role, name in roles.items():
        r = runs[name]
        est, sim = r["cr_est"], r["cr_sim"]
        close = (math.isnan(sim) or math.isnan(est) or est >= sim * (1 - tol))
        plans.append({"role": role, "plan": name, "cr_est": est, "cr_est_ci_hi": r["cr_est_ci_hi"], "cr_sim": sim,
                      "jfi": r["jfi"], "goodput": r["goodput"], "within_sim": r["within_limit_sim"],
                      "estimate_holds": bool(close)})
    chosen = runs[roles["chosen"]]
    any_within = any(r["within_limit_sim"] for r in rows)
    chosen_ok = chosen["within_limit_sim"] or (not any_within and agree["agrees"])
    hold = all(p["estimate_holds"] for p in plans if p["role"] != "contender")
    return {"experiment": exp.name, "nodes": exp.nodes, "policy": exp.policy, "rate": rate,
            "load": round(rate / exp.capacity, 3), "plans": plans, "best": agree["best"], "agrees": agree["agrees"],
            "chosen_within_limit": bool(chosen_ok), "estimates_hold": hold, "passes": bool(chosen_ok and hold)}


def run_point(point: Point, profile: Profile, window: int = 600, seed: int = 0, workers: Optional[int] = None,
              progress: Optional[Callable[[str], None]] = None) -> list[dict]:
    """Judge (every plan) and compile every rate of ``point``, rates in ``workers`` processes (default: one
    per CPU); one :func:`check_point` record per rate."""
    import os

    from ray_adaptive.experiments.sweep import choice_agreement, plan_space, sweep_rate

    exp = point.exp
    _, space = plan_space(exp.policy, exp.nodes)
    args = [(exp, rate, point.seconds, point.warmup, list(space), profile, window, seed, True)
            for rate in point.rates()]
    workers = min(workers or os.cpu_count() or 1, len(args))
    if workers <= 1:
        parts = [sweep_rate(*a, progress=progress, with_estimates=True) for a in args]
    else:
        import concurrent.futures
        import multiprocessing

        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            parts = [f.result() for f in [pool.submit(sweep_rate, *a, with_estimates=True) for a in args]]
    out = []
    limit = exp.quality_limit()
    for rate, (rows, estimates) in zip(point.rates(), parts):
        agree = choice_agreement(rows)[0]
        out.append(check_point(exp, rate, rows, agree, limit, estimates))
    return out


def _cr(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.2f}"


def format_table(results: Sequence[dict]) -> str:
    """The check as a Markdown table: per point, the chosen plan and its runner-up (estimated [95% CI upper
    end] vs simulated ratio), the simulator's best, and the verdicts."""
    head = ("workload", "nodes", "load", "chosen", "est (CI hi)", "sim", "runner-up", "est (CI hi)", "sim",
            "simulator's best", "agrees", "passes")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        by = {p["role"]: p for p in r["plans"]}
        c, u = by["chosen"], by.get("runner-up")
        best = ", ".join(r["best"][:2]) + (f" (+{len(r['best']) - 2})" if len(r["best"]) > 2 else "")
        cells = [r["experiment"], str(r["nodes"]), f"{r['load']:.2f}", c["plan"],
                 f"{_cr(c['cr_est'])} ({_cr(c['cr_est_ci_hi'])})", _cr(c["cr_sim"]) + ("" if c["within_sim"] else " ✗"),
                 u["plan"] if u else "-", f"{_cr(u['cr_est'])} ({_cr(u['cr_est_ci_hi'])})" if u else "-",
                 (_cr(u["cr_sim"]) + ("" if u["within_sim"] else " ✗")) if u else "-",
                 best, "yes" if r["agrees"] else "NO", "yes" if r["passes"] else "NO"]
        if "contender" in by:
            k = by["contender"]
            cells[6] += f"; contender {k['plan']} {_cr(k['cr_est'])} vs {_cr(k['cr_sim'])}"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(results: Sequence[dict]) -> dict:
    n = len(results)
    return {"points": n, "agree": sum(r["agrees"] for r in results), "pass": sum(r["passes"] for r in results),
            "chosen_within_limit": sum(r["chosen_within_limit"] for r in results),
            "estimates_hold": sum(r["estimates_hold"] for r in results),
            "agreement": round(sum(r["agrees"] for r in results) / n, 4) if n else 1.0}
