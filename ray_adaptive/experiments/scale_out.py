"""The scale-out experiment: ``ray-adaptive reproduce --adaptive --scale-out``.

DRF-LB on the paper's tenants (one greedy at 3x each other) on a cluster that
grows and shrinks -- 12 -> 200 -> 12 nodes by default (``--quick``: 4 -> 24 -> 4)
-- with the arrival rate following the size: each phase offers ``load`` (0.6)
of its cluster's execution bound. The rate moves first and the nodes follow
``lag`` (a quarter) of a phase later, as an autoscaler adds nodes for a backlog
and removes idle ones: during the lag the old cluster carries the new rate.
Nodes join empty; a node that leaves is drained (:mod:`ray_adaptive.sim.membership`).

Runs, on the same arrivals and node events: every plan the compiler lists
(each a *static* run: the same plan throughout, put on the new nodes at
each node event, lowered for their count), and the adaptive controller
(:class:`~ray_adaptive.sim.adaptive.AdaptiveRun`) with an estimate table per
size -- computed by the compiler on a window of the workload at that size
(:func:`~ray_adaptive.compiler.estimate_table`) -- acting at once on a node
event (:mod:`ray_adaptive.control.controller`: the first evaluation at a new
size needs no agreement).

Per run and phase: goodput (the phase's arrivals that finished on time, per
second of the phase: a backlog carried into the next phase counts in the
phase that offered it), the competitive ratio of its decisions, scheduler seconds per
task decided (every scheduler's busy time in the phase over the tasks placed
in it), whether the ratio is within the policy's limit. Per phase: the best
static plan within the limit, the adaptive run's goodput against it, and
which static plans lose (goodput more than 5% below the best, or out of the
limit) -- or that none does.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from ray_adaptive.control import Controller
from ray_adaptive.compiler import Profile, estimate_table, lower
from ray_adaptive.compiler.estimates import busy_level
from ray_adaptive.dsl import load_policy
from ray_adaptive.experiments.sweep import plan_space, trace_seconds
from ray_adaptive.experiments.workload import Experiment
from ray_adaptive.sim.adaptive import SWITCH_PAUSE_S, AdaptiveRun
from ray_adaptive.sim.membership import resize_steps
from ray_adaptive.sim.plan_sim import PlanSim, periodic_overload
from ray_adaptive.sim.timeline import run_epochs
from ray_adaptive.workload.rates import RateProfile

__all__ = ["SCALE_OUT_NODES", "QUICK_SCALE_OUT_NODES", "scale_out_experiment", "reproduce_scale_out",
           "phase_summary"]

SCALE_OUT_NODES = (12, 200, 12)
QUICK_SCALE_OUT_NODES = (4, 24, 4)
SCALE_OUT_LOAD = 0.6  # of each phase's execution bound
SCALE_OUT_LAG = 0.25  # of a phase: the nodes follow the rate this much later (a controller's window)
TABLE_FRACTIONS = (0.1, 0.3, 0.6, 1.0, 1.5)  # the estimate tables' grid, x each size's execution bound
WITHIN = 0.05  # "within 5% of the best static plan"


def scale_out_experiment(sizes: Sequence[int]) -> Experiment:
    """The paper's workload on ``sizes[0]`` nodes, its clients as many as the largest size's nodes (split
    as the tenants' rates, 1:1:3): front-ends scale with the load, so a decentralized plan has a client
    per scheduler at the peak."""
    peak = max(sizes)
    shares = (("a", 1.0), ("b", 1.0), ("greedy", 3.0))
    clients = tuple((n, max(1, round(peak * w / 5.0))) for n, w in shares)
    return Experiment("scale-out", shares=shares, nodes=sizes[0], clients=clients)


def _settings(phase_s: float):
    from ray_adaptive.experiments.reproduce import phase_settings

    return phase_settings(phase_s)


def _busy(sim: PlanSim) -> float:
    """Every scheduler's busy seconds so far (the plans switched from too)."""
    return sum(s.busy_s for s in sim.result().schedulers)


def _run(name: str, sim: PlanSim, phase_s: float, phases: int, every: float, on_epoch=None) -> tuple[list, list]:
    """Epochs of ``sim`` and, per phase, its busy seconds and the tasks it placed."""
    marks = [(0.0, 0.0)]

    def watch(e, s) -> None:
        if on_epoch is not None:
            on_epoch(e, s)
        if abs(e.end / phase_s - round(e.end / phase_s)) < 1e-9 and e.end > marks[-1][0]:
            marks.append((e.end, _busy(s)))

    epochs = run_epochs(sim, every, until=phase_s * phases, on_epoch=watch)
    sim.run()  # (the last phase's tasks still in flight run to their end: every task is resolved)
    rows = []
    for i in range(phases):
        lo, hi = i * phase_s, (i + 1) * phase_s
        es = [e for e in epochs if lo <= e.start < hi]
        n = sum(e.decisions for e in es if not math.isnan(e.cr))
        cr = sum(e.cr * e.decisions for e in es if not math.isnan(e.cr)) / n if n else math.nan
        placed = sum(1 for t in sim.tasks if t.dispatched_at is not None and lo <= t.dispatched_at < hi)
        busy = marks[i + 1][1] - marks[i][1] if i + 1 < len(marks) else math.nan
        on_time = sum(1 for t in sim.tasks if lo <= t.arrival < hi and t.on_time)
        rows.append({"plan": name, "phase": i + 1, "goodput": on_time / (hi - lo),
                     "cr": cr, "sched_ms_per_task": 1e3 * busy / placed if placed else math.nan,
                     "in_force": ", ".join(dict.fromkeys(e.plan for e in es))})
    timeline = [{**e.as_dict(), "run": name} for e in epochs]
    return rows, timeline


def phase_summary(rows: Sequence[dict], limit: Optional[float], within: float = WITHIN) -> list[dict]:
    """Per phase: the best static plan within the limit, the adaptive run against it, the static plans
    that lose (more than ``within`` below the best, or out of the limit)."""
    out = []
    for phase in sorted({r["phase"] for r in rows}):
        static = [r for r in rows if r["phase"] == phase and r["plan"] != "adaptive"]
        ok = [r for r in static if limit is None or (not math.isnan(r["cr"]) and r["cr"] <= limit)]
        best = max(ok or static, key=lambda r: r["goodput"])
        adaptive = next(r for r in rows if r["phase"] == phase and r["plan"] == "adaptive")
        losers = sorted(r["plan"] for r in static if r not in ok or r["goodput"] < (1 - within) * best["goodput"])
        out.append({"phase": phase, "nodes": best["nodes"], "rate": best["rate"], "best": best["plan"],
                    "best_goodput": best["goodput"], "adaptive_goodput": adaptive["goodput"],
                    "ratio": adaptive["goodput"] / best["goodput"] if best["goodput"] > 0 else math.nan,
                    "adaptive_cr": adaptive["cr"], "adaptive_in_force": adaptive["in_force"],
                    "within_limit": len(ok), "static": len(static), "losers": losers})
    return out


def reproduce_scale_out(out_dir: "str | Path" = "out/reproduce_scale_out", quick: bool = False,
                        sizes: Optional[Sequence[int]] = None, phase_s: Optional[float] = None,
                        load: float = SCALE_OUT_LOAD, lag: float = SCALE_OUT_LAG, seed: int = 0,
                        pause_s: Optional[float] = None, window: Optional[int] = None,
                        plans: Optional[Sequence[str]] = None, echo: Callable[[str], None] = print) -> dict:
    """Run the experiment (see the module doc); write ``scale_out_phases.csv`` and ``scale_out_timeline.csv``
    to ``out_dir``; print per phase every run and the summary, and the adaptive run's switches.
    ``plans``: the static plans to run (default: every plan the compiler lists that can run)."""
    import pandas as pd

    sizes = tuple(sizes or (QUICK_SCALE_OUT_NODES if quick else SCALE_OUT_NODES))
    if len(sizes) < 2 or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes):
        raise ValueError(f"sizes must be at least two node counts >= 1, found {sizes!r}")
    phase_s = phase_s or (4.0 if quick else 20.0)
    if not 0 < phase_s < math.inf or not 0 < load < math.inf or not 0 <= lag < 1:
        raise ValueError(f"need a phase > 0 s, a load > 0 and a lag in [0, 1); found {phase_s}, {load}, {lag}")
    window = window or (150 if quick else 300)
    pause = SWITCH_PAUSE_S if pause_s is None else pause_s
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    exp = scale_out_experiment(sizes)
    policy = load_policy(exp.policy)
    limit = exp.quality_limit()
    cap = lambda n: n * exp.executors / exp.duration  # noqa: E731
    rates = [load * cap(n) for n in sizes]
    profile = RateProfile("steps", points=tuple((i * phase_s, r) for i, r in enumerate(rates)))
    seconds = phase_s * len(sizes)
    start = time.perf_counter()
    sc = exp.workload(0.0, seconds, seed=seed, profile=profile)
    steps = [((i + lag) * phase_s, sizes[i] - sizes[i - 1]) for i in range(1, len(sizes)) if sizes[i] != sizes[i - 1]]
    events = resize_steps(steps, sc.nodes)
    cache: dict = {}

    def at_size(n: int, executors: int = 0):
        """The estimate table for ``n`` nodes and every plan lowered for them (the runnable ones first)."""
        if n not in cache:
            e = dataclasses.replace(exp, nodes=n)
            r = load * cap(n)
            trace = e.workload(r, trace_seconds(r, window, timeout=exp.timeout), seed=seed + 1).tasks
            table = estimate_table(policy, nodes=n, trace=trace, profile=Profile(), measure=False, window=window,
                                   limit=exp.limit, seed=seed, workers=1, fractions=TABLE_FRACTIONS)
            analysis, space = plan_space(exp.policy, n)
            lowered = {p.name: lower(space[p.name], analysis, Profile(), n) for p in table.plans}
            cache[n] = (table, {k: v for k, v in lowered.items() if not periodic_overload(v)}, lowered)
        return cache[n][0], cache[n][1]

    for n in dict.fromkeys(sizes):
        at_size(n)
    tables_s = time.perf_counter() - start
    first_table, first_plans = at_size(sizes[0])
    names = list(plans) if plans else [p.name for p in first_table.plans]
    cannot = {name: [n for n in dict.fromkeys(sizes) if name not in at_size(n)[1]] for name in names}
    every = phase_s / 20
    rows, timeline = [], []

    def prefill(name: str) -> float:
        est = first_table.at(rates[0])[0][name]
        return busy_level(rates[0], est.throughput, cap(sizes[0]))

    for name in names:
        if cannot[name]:
            continue
        sim = PlanSim(first_plans[name], sc, seed=seed, prefill=prefill(name), cr_every=2, events=events,
                      relower=lambda p, n, name=name: at_size(n)[1][name], resize_pause_s=pause)
        r, tl = _run(name, sim, phase_s, len(sizes), every)
        rows += r
        timeline += tl
    first = first_table.at(rates[0])[1]
    sim = PlanSim(first_plans[first], sc, seed=seed, prefill=prefill(first), cr_every=2, events=events,
                  resize_pause_s=pause)
    run = AdaptiveRun(sim, Controller(first_table, _settings(phase_s), first), first_plans, pause,
                      sizes=lambda n, executors: at_size(n))
    r, tl = _run("adaptive", sim, phase_s, len(sizes), every, on_epoch=run.on_epoch)
    rows += r
    timeline += tl
    for row in rows:
        i = row["phase"] - 1
        row.update(nodes=sizes[i], rate=round(rates[i], 1))
    summary = phase_summary(rows, limit)
    elapsed = time.perf_counter() - start
    pd.DataFrame(rows).to_csv(out / "scale_out_phases.csv", index=False)
    pd.DataFrame(timeline).to_csv(out / "scale_out_timeline.csv", index=False)
    switches = [x.as_dict() for x in run.history]
    _print(echo, sizes, phase_s, load, lag, rows, summary, switches, first, cannot, elapsed, tables_s, limit,
           {n: at_size(n)[0] for n in dict.fromkeys(sizes)}, rates)
    echo(f"wrote {out / 'scale_out_phases.csv'} and {out / 'scale_out_timeline.csv'}")
    return {"phases": rows, "summary": summary, "switches": switches, "elapsed_s": elapsed, "tables_s": tables_s,
            "cannot_run": {k: v for k, v in cannot.items() if v}, "started_with": first,
            "tasks": len(sc.tasks), "unresolved": sim.unresolved}


def _print(echo, sizes, phase_s, load, lag, rows, summary, switches, first, cannot, elapsed, tables_s, limit,
           tables, rates) -> None:
    echo(f"Scale-out: {' -> '.join(map(str, sizes))} nodes, {phase_s:g} s phases at {load:g} x each size's "
         f"execution bound ({', '.join(f'{r:.0f}' for r in rates)} tasks/s); nodes follow the rate "
         f"{lag * phase_s:g} s later; {len({r['plan'] for r in rows})} runs in {elapsed:.1f} s "
         f"(estimate tables {tables_s:.1f} s)")
    echo("The compiler's choice per phase (its table for the phase's size, at the phase's rate): " + "; ".join(
        f"{n} nodes, {r:.0f} tasks/s: {tables[n].at(r)[1]}" for n, r in zip(sizes, rates)))
    for name, ns in cannot.items():
        if ns:
            echo(f"  {name}: cannot run on {', '.join(map(str, ns))} nodes (its heartbeat rounds outlast the period)")
    head = ("run", "phase", "nodes", "rate", "goodput", "CR", "sched ms/task", "plan(s) in force")
    lines = [(r["plan"], r["phase"], r["nodes"], f"{r['rate']:.0f}", f"{r['goodput']:.0f}", f"{r['cr']:.3f}",
              f"{r['sched_ms_per_task']:.3f}", r["in_force"] if r["plan"] == "adaptive" else "") for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths))  # noqa: E731
    echo("\n".join([line(head), line(["-" * w for w in widths])] + [line(x) for x in lines]))
    echo("")
    echo(f"Per phase (within the limit: CR <= {limit:g}; losing: > {WITHIN:.0%} below the best, or out of the limit)")
    for s in summary:
        lose = (f"losing: {', '.join(s['losers'])}" if s["losers"]
                else "no static plan loses: every one is within 5% of the best and within the limit")
        echo(f"  phase {s['phase']} ({s['nodes']} nodes, {s['rate']:.0f} tasks/s): best static {s['best']} "
             f"{s['best_goodput']:.0f}/s; adaptive {s['adaptive_goodput']:.0f}/s = {s['ratio']:.3f} of it "
             f"(CR {s['adaptive_cr']:.3f}; {s['adaptive_in_force']}); {s['within_limit']} of {s['static']} static "
             f"plans within the limit; {lose}")
    echo(f"  adaptive: started with {first}; {len(switches)} switch(es)")
    for x in switches:
        echo(f"    {x['time']:7.2f} s  {x['from']} -> {x['to']}  ({x.get('nodes', '?')} nodes, measured "
             f"{x['rate']:.0f} tasks/s; {x['reason']})")
