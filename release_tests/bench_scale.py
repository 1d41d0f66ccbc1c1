"""The compiler and the plan simulator at the cluster sizes Ray users run.

    python release_tests/bench_scale.py [--smoke-test] [--out bench_scale.json]

1. compile time: DRF-LB on the paper's workload (three tenants, one greedy at
   3x) at 12, 100, 400 and 1,000 nodes and at 1%, 50%, 100% and 200% of the
   nodes' execution bound; fixed latency model, replays in one process per
   CPU (compile_policy's default); wall and CPU seconds (this process and
   the forked replays), median of 3. Target: < 5 s each.
2. a static-plan ramp on 1,000 simulated nodes: the rate steps 10% -> 60%
   -> 120% -> 200% -> 10% of the execution bound, 1.5 s a phase, under each
   of three plans that can run there; simulated events, wall time,
   events/s, and goodput / JFI / competitive ratio per phase.
3. the adaptive run of the same ramp: the runtime's controller on the
   simulated workload, switching plans live (``ray_adaptive.sim.adaptive``);
   its estimate table computed for the 1,000 nodes at the ramp's levels
   (time reported apart), its settings scaled to the phases (evaluations
   every quarter phase over half a phase, two in a row, a phase's dwell);
   wall time, events/s, its switches and the same figures per phase.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from ray_adaptive.control import Settings
from ray_adaptive.compiler import Profile, compile_policy, lower
from ray_adaptive.compiler.estimates import busy_level, effective_parallelism, estimate_cost
from ray_adaptive.dsl import load_policy
from ray_adaptive.experiments.simulate import adaptive_run, adaptive_setup
from ray_adaptive.experiments.sweep import plan_space
from ray_adaptive.experiments.workload import Experiment
from ray_adaptive.sim.plan_sim import PlanSim
from ray_adaptive.sim.timeline import epoch_of, run_epochs
from ray_adaptive.workload.rates import RateProfile

NODES = (12, 100, 400, 1000)
FRACTIONS = (0.01, 0.5, 1.0, 2.0)
RAMP = (0.1, 0.6, 1.2, 2.0, 0.1)
RAMP_PLANS = ("hybrid+power-of-2", "decentralized+power-of-2+sync 100ms", "centralized+power-of-2")
FIXED = Profile(default_unit_s=10e-6)


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def bench_compile(nodes: int, fraction: float, repeats: int) -> dict:
    policy = load_policy("drf_lb")
    rate = fraction * Experiment(nodes=nodes).capacity
    walls, cpus = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), _cpu()
        c = compile_policy(policy, rate=rate, nodes=nodes, profile=FIXED, measure=False)
        walls.append(time.perf_counter() - t0)
        cpus.append(_cpu() - c0)
    return {"nodes": nodes, "load": fraction, "rate": round(rate, 1), "wall_s_median": round(statistics.median(walls), 3),
            "wall_s_all": [round(x, 3) for x in walls], "cpu_s_median": round(statistics.median(cpus), 3),
            "window_tasks": len(c.window.tasks), "replayed_plans": sum(1 for e in c.estimates if not e.cannot_run),
            "choice": c.choice.estimate.plan.name}


def _ramp(nodes: int, phase_s: float):
    exp = Experiment(nodes=nodes)
    profile = RateProfile("steps", points=tuple((i * phase_s, f * exp.capacity) for i, f in enumerate(RAMP)))
    return exp, profile, phase_s * len(RAMP)


def _phase(e) -> dict:
    return {"offered": e.offered, "goodput": e.goodput, "jfi": e.jfi, "cr": e.cr}


def bench_ramp(nodes: int, phase_s: float, plans=RAMP_PLANS) -> dict:
    exp, profile, seconds = _ramp(nodes, phase_s)
    cap = exp.capacity
    t0 = time.perf_counter()
    sc = exp.workload(0.0, seconds, seed=0, profile=profile)
    gen = time.perf_counter() - t0
    analysis, space = plan_space("drf_lb", nodes)
    out = {"nodes": nodes, "tasks": len(sc.tasks), "seconds": seconds, "profile": profile.label(),
           "generate_s": round(gen, 2), "plans": {}}
    for name in plans:
        plan = space[name]
        est = estimate_cost(plan, analysis, FIXED, nodes, effective_parallelism(plan, sc, nodes))
        sim = PlanSim(lower(plan, analysis, FIXED, nodes), sc, prefill=busy_level(profile.at(0.0), est.throughput, cap),
                      cr_every=2)
        t0, c0 = time.perf_counter(), time.process_time()
        epochs = run_epochs(sim, phase_s)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        out["plans"][name] = {"events": sim.events, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                              "events_per_s": round(sim.events / wall), "events_per_cpu_s": round(sim.events / cpu),
                              "phases": [_phase(e) for e in epochs]}
    return out


def bench_adaptive_ramp(nodes: int, phase_s: float, window: int) -> dict:
    """The ramp of :func:`bench_ramp` under the adaptive controller (see the module doc)."""
    exp, profile, seconds = _ramp(nodes, phase_s)
    settings = Settings(every_s=phase_s / 4, window_s=phase_s / 2, consecutive=2, dwell_s=phase_s)
    t0 = time.perf_counter()
    setup = adaptive_setup(exp, profile, seconds, FIXED, window=window, settings=settings,
                           fractions=sorted(set(RAMP)))
    table_s = time.perf_counter() - t0
    sc = exp.workload(0.0, seconds, seed=0, profile=profile)
    run = adaptive_run(exp, setup, sc, profile, FIXED)
    sim = run.sim
    t0, c0 = time.perf_counter(), time.process_time()
    epochs = run_epochs(sim, settings.every_s, on_epoch=run.on_epoch)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    # (a phase's figures over the whole phase, the plans in force from its evaluation epochs)
    phases = [epoch_of(sim, i * phase_s, (i + 1) * phase_s) for i in range(len(RAMP))]
    in_force = [list(dict.fromkeys(e.plan for e in epochs if i * phase_s <= e.start < (i + 1) * phase_s))
                for i in range(len(RAMP))]
    return {"nodes": nodes, "tasks": len(sc.tasks), "table_s": round(table_s, 2), "events": sim.events,
            "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "events_per_s": round(sim.events / wall),
            "events_per_cpu_s": round(sim.events / cpu), "evaluations": len(run.evaluations),
            "choices": [setup.table.at(f * exp.capacity)[1] for f in RAMP],  # (the table's, per phase)
            "switches": [x.as_dict() for x in run.history],
            "phases": [{**_phase(e), "in_force": plans} for e, plans in zip(phases, in_force)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke-test", action="store_true", help="12 and 100 nodes, 1 repeat; 100-node ramps")
    ap.add_argument("--out", default=None, help="write the figures to this JSON file")
    args = ap.parse_args()
    smoke = args.smoke_test
    nodes, fractions, repeats = ((12, 100), (0.5, 2.0), 1) if smoke else (NODES, FRACTIONS, 3)
    figures = {"compile": [], "ramp": None, "adaptive_ramp": None}
    print(f"{'nodes':>6} {'load':>6} {'rate':>9} {'wall s':>8} {'cpu s':>7} {'tasks':>6}  choice")
    for n in nodes:
        for f in fractions:
            r = bench_compile(n, f, repeats)
            figures["compile"].append(r)
            print(f"{n:6d} {f:6.0%} {r['rate']:9.0f} {r['wall_s_median']:8.3f} {r['cpu_s_median']:7.3f} "
                  f"{r['window_tasks']:6d}  {r['choice']}", flush=True)
    ramp = bench_ramp(100, 0.3) if smoke else bench_ramp(1000, 1.5)
    figures["ramp"] = ramp
    print(f"\nramp on {ramp['nodes']} nodes, {ramp['profile']} ({ramp['tasks']:,} tasks, generated in "
          f"{ramp['generate_s']} s)")
    for name, x in ramp["plans"].items():
        phases = "  ".join(f"{p['goodput']:.0f}/s jfi {p['jfi']:.2f} cr {p['cr']:.2f}" for p in x["phases"])
        print(f"  {name:<40} {x['events']:>9,} events in {x['wall_s']:.1f} s ({x['events_per_s']:,} events/s wall, "
              f"{x['events_per_cpu_s']:,}/CPU s) | {phases}")
    ad = bench_adaptive_ramp(100, 0.6, 50) if smoke else bench_adaptive_ramp(1000, 1.5, 400)
    figures["adaptive_ramp"] = ad
    print(f"\nadaptive ramp on {ad['nodes']} nodes ({ad['tasks']:,} tasks; estimate table in {ad['table_s']} s): "
          f"{ad['events']:,} events in {ad['wall_s']:.1f} s ({ad['events_per_s']:,} events/s wall, "
          f"{ad['events_per_cpu_s']:,}/CPU s), {len(ad['switches'])} switch(es) in {ad['evaluations']} evaluations")
    print("  the estimate table's choice per phase: " + ", ".join(ad["choices"]))
    for x in ad["switches"]:
        print(f"  {x['time']:6.2f} s  {x['from']} -> {x['to']} (measured {x['rate']:.0f} tasks/s; {x['reason']})")
    print("  | " + "  ".join(f"{p['goodput']:.0f}/s jfi {p['jfi']:.2f} cr {p['cr']:.2f}" for p in ad["phases"]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
