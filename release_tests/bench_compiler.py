"""Speed of the compiler and the plan simulator.

    python release_tests/bench_compiler.py [--smoke-test] [--out bench_compiler.json]

1. compile: DRF-LB on a 10k-event trace (10,000 tasks of the paper's workload
   at 700 tasks/s, written to CSV and read back), the default window (at
   least 600 tasks, longer where the plans' periods, the clients or the load
   ask for it; replayed under the plans whose ratio can change the choice
   until each plan's competitive ratio is settled; also timed with
   whole-window replays of every plan); median of 5, in 1 process and in one
   per CPU (compile_policy's default), wall time and CPU time (this process
   and the forked ones: steadier on a shared machine). Target: < 0.2 s.
2. the full default sweep (`ray-adaptive reproduce`: 10 rates x 3 plans + the
   compiler's choice, 2.5 simulated seconds each): wall time and simulated
   events/s. Target: < 10 s.
3. the simulator alone: events/s of one long run per architecture.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

from ray_adaptive.compiler import Profile, compile_policy
from ray_adaptive.compiler.lowering import lower
from ray_adaptive.dsl import load_policy
from ray_adaptive.experiments.reproduce import PAPER, reproduce
from ray_adaptive.experiments.sweep import plan_space
from ray_adaptive.sim.plan_sim import simulate
from ray_adaptive.workload.trace import read_trace, write_trace


def bench_compile(tasks: int, repeats: int, workers: int = 1, settle: bool = True) -> dict:
    policy = load_policy("drf_lb")
    rate = 700.0
    trace = PAPER.workload(rate, tasks / rate * 1.05, seed=0).tasks[:tasks]
    path = os.path.join(tempfile.mkdtemp(), "trace.csv")
    write_trace(path, trace)
    reads, compiles, cpus, choice = [], [], [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        specs = read_trace(path)
        t1, c1 = time.perf_counter(), _cpu()
        result = compile_policy(policy, trace=specs, workers=workers, settle=settle,
                                replay="deciding" if settle else "all")
        t2, c2 = time.perf_counter(), _cpu()
        reads.append(t1 - t0)
        compiles.append(t2 - t1)
        cpus.append(c2 - c1)
        choice = result.choice.estimate.plan.name
    sampled = statistics.median(e.quality["decisions"] for e in result.estimates if "decisions" in e.quality)
    return {"workers": workers, "settle": settle, "decisions_sampled_median": sampled, "trace_events": len(specs), "read_s_median": round(statistics.median(reads), 4),
            "compile_s_median": round(statistics.median(compiles), 4), "compile_s_all": [round(x, 4) for x in compiles],
            "compile_cpu_s_median": round(statistics.median(cpus), 4),
            "plans": len(result.estimates), "replayed": sum("decisions" in e.quality for e in result.estimates),
            "window": len(result.window.tasks), "choice": choice}


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the replays' forked processes): on a shared
    machine, steadier than wall time."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def bench_sweep(quick: bool) -> dict:
    out = tempfile.mkdtemp()
    t0 = time.perf_counter()
    s = reproduce(out, quick=quick, show_progress=False, echo=lambda *_: None)
    wall = time.perf_counter() - t0
    return {"quick": quick, "rates": len({r["rate"] for r in s["rows"]}), "runs": len(s["rows"]),
            "wall_s": round(wall, 2), "sweep_s": round(s["elapsed_s"], 2), "events": s["events"],
            "events_per_s": round(s["events"] / s["elapsed_s"])}


def bench_sim(seconds: float) -> dict:
    analysis, space = plan_space("drf_lb", 12)
    prof = Profile()
    sc = PAPER.workload(650, seconds, seed=0)
    out = {}
    for name in ("centralized", "decentralized+sync 100ms", "hybrid"):
        t0 = time.perf_counter()
        r = simulate(lower(space[name], analysis, prof, 12), sc, cr_every=2)
        dt = time.perf_counter() - t0
        out[name] = {"events": r.events, "s": round(dt, 3), "events_per_s": round(r.events / dt)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke-test", action="store_true", help="1k-event trace, quick sweep, 1 repeat")
    ap.add_argument("--out", default=None, help="write the figures to this JSON file")
    args = ap.parse_args()
    smoke = args.smoke_test
    cpus = os.cpu_count() or 1
    n, repeats = (1_000, 1) if smoke else (10_000, 5)
    figures = {
        "compile": bench_compile(n, repeats),
        "compile_parallel": bench_compile(n, repeats, workers=cpus),
        "compile_whole_window": bench_compile(n, repeats, workers=cpus, settle=False),
        "sweep": bench_sweep(quick=smoke),
        "simulator": bench_sim(1.0 if smoke else 4.0),
    }
    s = figures["sweep"]
    for c in (figures["compile"], figures["compile_parallel"], figures["compile_whole_window"]):
        replays = "until settled" if c["settle"] else "whole window"
        print(f"compile drf_lb, {c['trace_events']:,}-event trace, {c['workers']} process(es), replays {replays}: "
              f"{c['compile_s_median']:.3f} s median, {c['compile_cpu_s_median']:.3f} CPU s (+ {c['read_s_median']:.3f} s "
              f"reading the CSV; {c['replayed']} of {c['plans']} plans replayed, window {c['window']} tasks, median "
              f"{c['decisions_sampled_median']:.0f} decisions sampled per plan) -> {c['choice']}")
    print(f"{'quick' if s['quick'] else 'full default'} sweep: {s['runs']} runs over {s['rates']} rates in {s['sweep_s']:.1f} s "
          f"({s['events']:,} simulated events, {s['events_per_s']:,} events/s)")
    for name, x in figures["simulator"].items():
        print(f"simulator, {name}: {x['events']:,} events in {x['s']:.2f} s ({x['events_per_s']:,} events/s)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
