"""The standing check of the compiler's quality estimate (issue 23): where it decides, does it hold?

    python release_tests/check_estimates.py [--smoke-test] [--only NAME] [--out check_estimates.json]
                                            [--markdown table.md]

Points: every workload of the agreement benchmark at 7 rates across the
execution bound (and the paper's at 510, 520 and 540 tasks/s, where the
compiler once chose a plan the simulator found far outside the limit); the paper's
workload at 50, 200 and 1,000 nodes; weighted
fair queueing with weights 1:2:3:4 (JFI against weighted shares). At each,
every plan is simulated (the judge: ``seconds`` of arrivals, figures after
``warmup``) and the policy compiled on a separate trace (fixed latency
model: unit compute 10 us). Reported per point: the chosen plan and its
runner-up, estimated ratio (95% interval's upper end) against simulated,
the simulator's best plans, agreement; in all: agreement and how many
points pass (ray_adaptive.experiments.check says what passing means).
"""

from __future__ import annotations

import argparse
import json
import time

from ray_adaptive.compiler import Profile
from ray_adaptive.experiments.check import WEIGHTED, Point, format_table, run_point, scaled_paper, summary
from ray_adaptive.experiments.reproduce import WORKLOADS

FRACTIONS = (0.4, 0.78, 0.9, 0.97, 1.1, 1.25, 1.6)


def points(smoke: bool) -> list[Point]:
    if smoke:
        return [Point(WORKLOADS[0], (0.4, 1.6), seconds=1.2, warmup=0.4),
                Point(WEIGHTED, (1.5,), seconds=1.2, warmup=0.4),
                Point(scaled_paper(50), (1.27,), seconds=0.8, warmup=0.3)]
    return ([Point(exp, FRACTIONS) for exp in WORKLOADS]
            + [Point(WORKLOADS[0], (1.0, 520 / 510, 540 / 510)),  # where issue 23 and reproduce --adaptive
               # found the choice far outside the limit
               Point(scaled_paper(50), (0.4, 0.9, 1.1, 1.6)),
               Point(scaled_paper(200), (0.4, 0.9, 1.27, 1.6), seconds=2.5),
               Point(scaled_paper(1000), (0.05, 0.5, 1.0, 2.0), seconds=1.8, warmup=0.8),
               Point(WEIGHTED, (0.5, 0.9, 1.5))])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke-test", action="store_true", help="4 small points, short runs")
    ap.add_argument("--only", default=None, help="run only the workloads whose name contains this")
    ap.add_argument("--out", default=None, help="write every point's record to this JSON file")
    ap.add_argument("--markdown", default=None, help="write the table to this Markdown file")
    args = ap.parse_args()
    profile = Profile(default_unit_s=10e-6)
    results = []
    t0 = time.perf_counter()
    for p in points(args.smoke_test):
        if args.only and args.only not in p.exp.name:
            continue
        t = time.perf_counter()
        got = run_point(p, profile)
        results += got
        print(f"== {p.exp.name}: {p.exp.nodes} nodes, execution bound {p.exp.capacity:.0f} tasks/s "
              f"({time.perf_counter() - t:.0f} s)", flush=True)
        print(format_table(got), flush=True)
    s = summary(results)
    table = format_table(results)
    print(f"\nagreement {s['agree']}/{s['points']} ({s['agreement']:.0%}); chosen plan within the limit "
          f"{s['chosen_within_limit']}/{s['points']}; estimates hold {s['estimates_hold']}/{s['points']}; "
          f"points passing {s['pass']}/{s['points']} ({time.perf_counter() - t0:.0f} s)")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": s, "points": results}, f, indent=2, default=str)


if __name__ == "__main__":
    main()
