"""Reclaim on Ray (issue 39): a tenant arriving on a cluster a greedy tenant has filled, drf_reclaim against drf_lb.

    python release_tests/reclaim_ray.py [--smoke-test] [--task-s 25] [--timeout-s 2] [--out reclaim_ray.json]

On a 2-node x 2-CPU local cluster, each policy in turn runs centralized with ``queue=0`` and
``hold="caller"`` (docs/language.md, "On Ray"): tenant A submits 2 x executors preemptible tasks of
``--task-s`` seconds (every executor busy, as many waiting); once A's first runs have started and 1 s
more, tenant B submits two rounds of its fair share (half the executors; its tasks not preemptible).
``drf_reclaim`` is the shipped policy with its State constant ``timeout`` set to ``--timeout-s`` (5 s
shipped; shorter here to keep the run a few minutes: B holds nothing for the timeout plus the grace of
2 s, and the backlog period is about a task length); ``drf_lb`` has no preemption.

Every run of a task body leaves a file with its start, touched every 0.2 s while it runs (a stopped
run's worker is killed: its last touch is when it stopped); a completed body creates its marker with
O_EXCL. Reported per policy, as ray_adaptive/experiments/preemption.py computes them in the
simulator: Jain's index of the two tenants' executor-seconds (stopped runs included), each over its
fair share, over the *backlog period* -- from B's submission until the first tenant's backlog is
empty (its last task's final start); when B first holds its fair share (target: within the timeout
plus one task length); the preemptions and the seconds the stopped runs had run; every ref resolving
to its own result, each body completing exactly once, the State after and the audit.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Dict, List, Tuple

from _output import emit  # (beside this script: sys.path[0])
from _settle import settled_state

CAPACITY = [1.5, 2.0, 1.0]  # drf_lb's and drf_reclaim's State constant


def jain(xs: List[float]) -> float:
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)) if any(xs) else 0.0


def runs_of(folder: str, results: Dict[str, tuple]) -> Dict[str, List[Tuple[float, float]]]:
    """Task -> its runs (start, end): the final one from its result, the stopped ones from their files."""
    out: Dict[str, List[Tuple[float, float]]] = {}
    for f in os.listdir(folder):
        if ".run." not in f:
            continue
        name = f.split(".")[0]
        path = os.path.join(folder, f)
        with open(path) as fh:
            text = fh.read()
        if not text:  # (stopped as it began: it held its executor no measurable time)
            continue
        started = float(text)
        _, final_start, final_end = results[name]
        if abs(started - final_start) < 1e-6:
            out.setdefault(name, []).append((final_start, final_end))
        else:  # a stopped run: its last touch
            out.setdefault(name, []).append((started, os.path.getmtime(path)))
    return out


def one_policy(policy_name: str, policy, task_s: float, slots_hint: int, folder: str) -> dict:
    import ray

    import ray_adaptive as ra

    @ray.remote(num_cpus=1)
    def job(name, seconds, folder):
        """Tolerates starting more than once: each start has its own file; only a completed run marks done."""
        started = time.time()
        run = os.path.join(folder, f"{name}.run.{os.getpid()}.{time.time_ns()}")
        with open(run, "w") as f:
            f.write(repr(started))
        end = started + seconds
        while time.time() < end:
            time.sleep(max(0.0, min(0.2, end - time.time())))
            os.utime(run)
        os.close(os.open(os.path.join(folder, f"{name}.done"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return name, started, time.time()

    rt = ra.start(policy, plan="centralized", queue=0, hold="caller")
    try:
        slots = sum(n.executors for n in rt.topology.nodes if n.runs_tasks)
        assert slots == slots_hint, (slots, slots_hint)
        vec = [c / slots for c in CAPACITY]  # one executor's worth: `slots` tasks fill the capacity
        work = ra.policy(policy_name)(job)
        a = work.options(task={"tenant": "A", "resource_vec": vec}, preemptible=True)
        b = work.options(task={"tenant": "B", "resource_vec": vec})
        t_a = time.time()
        futures = {f"A{i:02d}": a.submit(f"A{i:02d}", task_s, folder) for i in range(2 * slots)}
        deadline = time.monotonic() + 120
        while sum(".run." in f for f in os.listdir(folder)) < slots and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(1.0)
        t_b = time.time()
        futures.update({f"B{i:02d}": b.submit(f"B{i:02d}", task_s, folder) for i in range(slots)})
        refs = {name: f.result(timeout=30 * task_s + 300) for name, f in futures.items()}
        values = ray.get(list(refs.values()), timeout=30 * task_s + 300)
        results = {name: v for name, v in zip(refs, values)}
        selector = ray.get(rt.topology.selector.stats.remote(), timeout=30)
        state, audit = settled_state(rt)
        grace = rt.policy.preempt.grace if rt.policy.preempt is not None else None
    finally:
        ra.shutdown()
    runs = runs_of(folder, results)
    tenant = {name: name[0] for name in refs}
    end = min(max(v[1] for n, v in results.items() if tenant[n] == x) for x in "AB")
    fair = slots / 2
    held = {x: 0.0 for x in "AB"}
    for name, rs in runs.items():
        for s, e in rs:
            held[tenant[name]] += max(0.0, min(e, end) - max(s, t_b))
    events = sorted([(s, 1) for n, rs in runs.items() if tenant[n] == "B" for s, _ in rs]
                    + [(e, -1) for n, rs in runs.items() if tenant[n] == "B" for _, e in rs])
    count, reach = 0, None
    for at, step in events:
        count += step
        if count >= fair and reach is None:
            reach = at - t_b
    done = sorted(f for f in os.listdir(folder) if f.endswith(".done"))
    stopped = {n: len(rs) - 1 for n, rs in runs.items() if len(rs) > 1}
    return {
        "policy": policy_name, "executors": slots, "task_s": task_s, "grace_s": grace,
        "a_submitted_before_b_s": round(t_b - t_a, 3),
        "backlog_period_s": round(end - t_b, 3),
        "jain": round(jain([held[x] / fair for x in "AB"]), 4),
        "share_of_fair": {x: round(held[x] / (fair * (end - t_b)), 3) for x in "AB"},
        "b_reaches_fair_share_after_s": None if reach is None else round(reach, 3),
        "preemptions": selector.get("preemptions", 0),
        "wasted_s": selector.get("wasted_s", 0.0),
        "stopped_runs": sum(stopped.values()), "tasks_stopped": sorted(stopped),
        "results_ok": all(results[n][0] == n for n in refs),
        "completed_once": done == sorted(f"{n}.done" for n in refs),
        "state_after": state, "audit_exact": audit.exact,
        "makespan_s": round(max(v[2] for v in results.values()) - t_a, 3),
    }


def run(task_s: float, timeout_s: float) -> dict:
    from ray_adaptive.dsl import parse_policy, policy_path
    from ray_adaptive.local_multinode import start_local_cluster

    shipped = policy_path("drf_reclaim").read_text()
    text = shipped.replace("timeout: float = 5.0", f"timeout: float = {timeout_s!r}")
    assert text != shipped or timeout_s == 5.0, "drf_reclaim's timeout constant moved"
    reclaim = parse_policy(text, name="drf_reclaim_release")
    lc = start_local_cluster(2, 2)
    try:
        rows = {}
        for name, policy in (("drf_lb", "drf_lb"), ("drf_reclaim_release", reclaim)):
            rows[name.replace("_release", "")] = one_policy(name, policy, task_s, 4,
                                                            tempfile.mkdtemp(prefix=f"ra-reclaim-{name}-"))
    finally:
        lc.shutdown()
    r = rows["drf_reclaim"]
    target = timeout_s + task_s
    return {"nodes": 2, "executors": 4, "task_s": task_s, "timeout_s": timeout_s,
            "reach_target_s": target,
            "reclaim_reaches_within_target": r["b_reaches_fair_share_after_s"] is not None
            and r["b_reaches_fair_share_after_s"] <= target,
            "reclaim_jain_at_least_0_95": r["jain"] >= 0.95, **rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke-test", action="store_true", help="5-s tasks")
    ap.add_argument("--task-s", type=float, default=25.0)
    ap.add_argument("--timeout-s", type=float, default=2.0, help="drf_reclaim's timeout (5 s shipped)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    figures = run(5.0 if args.smoke_test else args.task_s, args.timeout_s)
    emit(figures, args.out)


if __name__ == "__main__":
    main()
