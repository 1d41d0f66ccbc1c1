"""A team's Ray job on a cluster whose operator serves DRF-LB to every job, its tenant bound to the team.

The operator, once per cluster::

    ray-adaptive serve drf_lb --bind tenant=metadata:team

Each team submits its jobs as usual; no ``ra.start`` in them::

    ray job submit --metadata-json '{"team": "a"}' --working-dir examples/jobs -- python team_job.py --tasks 200

The job's tasks carry no tenant: the service gives them their job's team, and
DRF-LB shares the cluster fairly between the teams whose jobs are running
(a task naming another team's tenant is refused: ``--claim b`` shows it).
It keeps ``--backlog`` tasks submitted at a time and prints JSON lines: the
time from its first submission to its first placement (attaching included),
one per ``--every`` finished tasks (``{"job", "finished", "t"}``), and a summary.
With ``--markers DIR``, each task creates ``DIR/<job>-<i>`` exclusively: a
task that ran twice fails on its second run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, wait

import ray

import ray_adaptive as ra


@ra.policy("drf_lb")
@ray.remote(num_cpus=1, max_retries=0)
def work(marker: str, seconds: float) -> str:
    """Leave a marker (a second run of this task fails on it), then work for ``seconds``."""
    if marker:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    time.sleep(seconds)
    return ray.get_runtime_context().get_node_id()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=200, help="tasks to run")
    ap.add_argument("--seconds", type=float, default=0.05, help="each task's work")
    ap.add_argument("--backlog", type=int, default=16, help="tasks submitted and not finished at a time")
    ap.add_argument("--every", type=int, default=10, help="a progress line per this many finished tasks")
    ap.add_argument("--markers", default="", help="a folder for one marker file per task")
    ap.add_argument("--claim", default="", help="first try one task naming this tenant (it is refused)")
    ap.add_argument("--address", default=None, help="the cluster (default: the job's)")
    ap.add_argument("--team", default=None,
                    help="a plain driver's team (its job metadata); under ray job submit, --metadata-json sets it")
    args = ap.parse_args(argv)
    config = ray.job_config.JobConfig(metadata={"team": args.team}) if args.team else None
    ray.init(address=args.address, job_config=config)
    job = ray.get_runtime_context().get_job_id()
    vec = [1.0, 0.5, 0.0]
    if args.claim:
        try:
            work.options(task={"tenant": args.claim, "resource_vec": vec}).remote("", 0.0)
            print(json.dumps({"job": job, "claim": args.claim, "refused": False}), flush=True)
        except ra.RayAdaptiveError as err:
            print(json.dumps({"job": job, "claim": args.claim, "refused": type(err).__name__, "why": str(err)}),
                  flush=True)
    task = work.options(task={"resource_vec": vec})
    marker = (lambda i: os.path.join(args.markers, f"{job}-{i}")) if args.markers else (lambda i: "")
    unplaced, running, submitted, finished = set(), [], 0, 0  # (Futures of placements; ObjectRefs)
    began, first = time.perf_counter(), None  # (the first submission attaches this job to the policy)
    while finished < args.tasks:
        while submitted < args.tasks and len(unplaced) + len(running) < args.backlog:
            unplaced.add(task.submit(marker(submitted), args.seconds))
            submitted += 1
        placed, unplaced = wait(unplaced, timeout=0.01, return_when=FIRST_COMPLETED)
        if placed and first is None:
            first = time.perf_counter() - began
            print(json.dumps({"job": job, "first_placement_s": round(first, 4)}), flush=True)
        running += [f.result() for f in placed]
        done, running = ray.wait(running, num_returns=len(running), timeout=0.01) if running else ([], [])
        for _ in ray.get(done):
            finished += 1
            if finished % args.every == 0:
                print(json.dumps({"job": job, "finished": finished, "t": time.time()}), flush=True)
    print(json.dumps({"job": job, "done": finished}), flush=True)
    ra.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
