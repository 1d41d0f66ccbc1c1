"""Replay speed of the ideal scheduler: decisions per second on a 10k-task scenario.

    python release_tests/bench_replay.py [--smoke-test] [--out replay.json]

DRF-LB, 3 tenants (one greedy at 3x), 12 nodes with one executor and a queue
of 2, ~90% load (so the pending queue is non-trivial). Median of 3 repeats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import dataclasses

from ray_adaptive.dsl import load_policy
from ray_adaptive.sim import replay
from ray_adaptive.workload.generate import multi_tenant


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke-test", action="store_true", help="1k tasks, 1 repeat")
    ap.add_argument("--out", default=None, help="write the figures to this JSON file")
    args = ap.parse_args()
    tasks, repeats = (1_000, 1) if args.smoke_test else (10_000, 3)
    # 12 nodes x 1 executor / 0.0235 s ~ 510 tasks/s; offer ~90% of it
    rate = 460.0
    seconds = tasks / rate
    figures = {}
    for policy_name in ("drf_lb", "least_loaded", "fifo"):
        policy = load_policy(policy_name)
        scenario = multi_tenant({"a": rate / 5, "b": rate / 5, "greedy": 3 * rate / 5}, seconds=seconds, nodes=12,
                                duration=0.0235, timeout=1.0, seed=0)
        if not policy.task_fields:
            scenario = dataclasses.replace(scenario, tasks=tuple(dataclasses.replace(t, fields={})
                                                                 for t in scenario.tasks))
        rates = []
        for _ in range(repeats):
            start = time.perf_counter()
            result = replay(policy, scenario)
            elapsed = time.perf_counter() - start
            rates.append(len(result.decisions) / elapsed)
        figures[policy_name] = {
            "tasks": len(scenario.tasks),
            "decisions": len(result.decisions),
            "decisions_per_s_median": round(statistics.median(rates)),
            "repeats": repeats,
        }
        print(f"{policy_name:>14}: {len(scenario.tasks)} tasks, median {statistics.median(rates):,.0f} decisions/s over {repeats}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
