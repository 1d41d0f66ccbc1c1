"""Preemption on Ray, the issue's scenario (issue 39): two nodes full of 20-s preemptible low tasks, one urgent task.

    python release_tests/preempt_ray.py [--smoke-test] [--low-s 20] [--out preempt_ray.json]

On a 2-node x 2-CPU local cluster, ``priority_preemptive`` (grace 2 s) with a State counting the tasks that
hold an executor (OnDispatch +1, OnPreempt and OnFinish -1) runs centralized with ``queue=0``. Every executor
gets a preemptible low-priority task of ``--low-s`` seconds; once all have started, a high-priority task of
1 s is submitted. Reported: when the high task started and finished after its submission (targets: within
its grace plus 1 s; long before the low tasks' end), every low task's ObjectRef resolved to its own result,
each low body completed exactly once (an O_EXCL marker per completion), the runs started per low task, the
selector's preemption counts, and the State after (zero) with the audit's verdict. The test suite runs
the same scenario with short, gated tasks (tests/test_preempt_ray.py).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import time

from _output import emit  # (beside this script: sys.path[0])
from _settle import settled_state

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from _builders import counted_preemptive  # noqa: E402 (the policy the tests run too)



def run(low_s: float) -> dict:
    import ray

    import ray_adaptive as ra
    from ray_adaptive.dsl import parse_policy
    from ray_adaptive.local_multinode import start_local_cluster

    folder = tempfile.mkdtemp(prefix="ra-preempt-")

    @ray.remote(num_cpus=1)
    def job(name, seconds, folder):
        started = time.time()
        with open(os.path.join(folder, f"{name}.started.{os.getpid()}"), "w") as f:
            f.write(repr(started))
        time.sleep(seconds)
        os.close(os.open(os.path.join(folder, f"{name}.done"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return f"{name} done", started, time.time()

    lc = start_local_cluster(2, 2)
    try:
        text = counted_preemptive()
        rt = ra.start(parse_policy(text, name="preempt_release"), plan="centralized", queue=0, hold="caller")
        work = ra.policy("preempt_release")(job)
        slots = sum(n.executors for n in rt.topology.nodes if n.runs_tasks)
        low = work.options(task={"priority": 0}, preemptible=True)
        t_low = time.time()
        refs = {f"low{i}": low.remote(f"low{i}", low_s, folder) for i in range(slots)}
        deadline = time.monotonic() + 120
        while sum(".started." in f for f in os.listdir(folder)) < slots and time.monotonic() < deadline:
            time.sleep(0.02)
        submitted = time.time()
        high = work.options(task={"priority": 10}).remote("high", 1.0, folder)
        placed = time.time()
        _, high_started, high_finished = ray.get(high, timeout=120)
        results = ray.get(list(refs.values()), timeout=10 * low_s + 120)
        ends = [end for _, _, end in results]
        done = sorted(f for f in os.listdir(folder) if f.endswith(".done"))
        starts: dict = {}
        for f in os.listdir(folder):
            if ".started." in f:
                starts[f.split(".")[0]] = starts.get(f.split(".")[0], 0) + 1
        selector = ray.get(rt.topology.selector.stats.remote(), timeout=30)
        state, audit = settled_state(rt)
        grace = rt.policy.preempt.grace
        ra.shutdown()
    finally:
        lc.shutdown()
    return {
        "nodes": 2, "executors": slots, "low_s": low_s, "grace_s": grace,
        "high_placed_after_s": round(placed - submitted, 3),
        "high_started_after_s": round(high_started - submitted, 3),
        "high_finished_after_s": round(high_finished - submitted, 3),
        "high_started_within_grace_plus_1s": high_started - submitted <= grace + 1.0,
        "low_tasks_first_end_after_high_submitted_s": round(min(ends) - submitted, 3),
        "low_tasks_all_ended_after_first_submitted_s": round(max(ends) - t_low, 3),
        "low_results_ok": [r for r, _, _ in results] == [f"{n} done" for n in refs],
        "completed_once": done == sorted(f"{n}.done" for n in [*refs, "high"]),
        "runs_started_per_low_task": dict(sorted((k, v) for k, v in starts.items() if k != "high")),
        "selector": {k: selector.get(k) for k in ("preemptions", "wasted_s", "spared", "nominated")},
        "state_after": state, "audit_exact": audit.exact,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke-test", action="store_true", help="4-s low tasks")
    ap.add_argument("--low-s", type=float, default=20.0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    figures = run(4.0 if args.smoke_test else args.low_s)
    emit(figures, args.out)


if __name__ == "__main__":
    main()
