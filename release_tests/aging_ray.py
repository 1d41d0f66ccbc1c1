"""Aging on Ray (issue 39): a low-priority task under a steady high-priority load at 100% of capacity.

    python release_tests/aging_ray.py [--smoke-test] [--max-age-s 5] [--out aging_ray.json]

On a 2-node x 2-CPU local cluster, ``priority`` runs centralized with ``queue=0`` and ``hold="caller"``
(docs/language.md, "On Ray"), its State constant ``max_age`` set to ``--max-age-s`` (10 s shipped). A
feeder keeps twice as many priority-1 tasks of 1 s waiting as there are executors, so every executor is busy
with high tasks throughout; after ``--warm-s`` one priority-0 task of 1 s is submitted. The high load
goes on until the low task has started (at most ``--load-s`` after its submission), then stops.

With aging (the shipped policy): the low task must start within ``max_age`` plus the wait for one
executor to free (a high task, 1 s). Without it (``age_weight`` 0, ``max_age`` 1e9: strict priority),
for contrast: the low task waits until the high load stops. Reported per variant: the low task's start
after its submission, the target, whether it was placed while the load went on, when the load stopped,
the fraction of the executors' time high
tasks held while the low one waited, and every ref resolving to its own result.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time

from _output import emit  # (beside this script: sys.path[0])

SHIPPED = ("age_weight: float = 2000.0", "max_age: float = 10.0")


def one_variant(variant: str, max_age_s: float, warm_s: float, load_s: float, folder: str) -> dict:
    import ray

    import ray_adaptive as ra
    from ray_adaptive.dsl import parse_policy, policy_path

    text = policy_path("priority").read_text()
    assert all(c in text for c in SHIPPED), "priority's State constants moved"
    if variant == "aging":
        text = text.replace(SHIPPED[1], f"max_age: float = {max_age_s!r}")
    else:  # strict priority
        text = text.replace(SHIPPED[0], "age_weight: float = 0.0").replace(SHIPPED[1], "max_age: float = 1e9")
    name = f"priority_{variant}_release"
    policy = parse_policy(text, name=name)

    @ray.remote(num_cpus=1)
    def job(task, seconds, folder):
        started = time.time()
        time.sleep(seconds)
        os.close(os.open(os.path.join(folder, f"{task}.done"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return task, started, time.time()

    rt = ra.start(policy, plan="centralized", queue=0, hold="caller")
    try:
        slots = sum(n.executors for n in rt.topology.nodes if n.runs_tasks)
        work = ra.policy(name)(job)
        high = work.options(task={"priority": 1})
        highs: list = []
        stop = threading.Event()

        def feed() -> None:  # twice as many high tasks waiting as executors, so none is ever idle
            while not stop.is_set():
                while sum(not f.done() for f in highs) < 2 * slots:
                    highs.append(high.submit(f"h{len(highs):05d}", 1.0, folder))
                time.sleep(0.01)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        time.sleep(warm_s)
        t_low = time.time()
        low_ref = work.options(task={"priority": 0}).submit("low", 1.0, folder)
        deadline = time.monotonic() + load_s
        t_placed = None
        while t_placed is None and time.monotonic() < deadline:
            t_placed = time.time() if low_ref.done() else time.sleep(0.005)
        placed_under_load = t_placed is not None
        stop.set()
        feeder.join()
        t_stop = time.time()
        while t_placed is None:
            t_placed = time.time() if low_ref.done() else time.sleep(0.005)
        low = ray.get(low_ref.result(timeout=300), timeout=300)
        refs = [f.result(timeout=300) for f in highs]
        results = ray.get(refs, timeout=300)
        done = sorted(f for f in os.listdir(folder) if f.endswith(".done"))
    finally:
        ra.shutdown()
    low_start = low[1] - t_low
    # the executors' time the high tasks held while the low one waited (1.0: every executor, throughout)
    held = sum(max(0.0, min(e, low[1]) - max(s, t_low)) for _, s, e in results)
    return {
        "variant": variant, "max_age_s": max_age_s if variant == "aging" else None,
        "low_placed_after_s": round(t_placed - t_low, 3),  # (its decision reached this process)
        "low_started_after_s": round(low_start, 3),
        "target_s": max_age_s + 1.0 if variant == "aging" else None,
        "within_target": low_start <= max_age_s + 1.0 if variant == "aging" else None,
        "load_stopped_after_s": round(t_stop - t_low, 3),
        # with aging the load stops once the low task is placed; without, at load_s, and the low task after
        "placed_under_load": placed_under_load,
        "high_busy_fraction_while_low_waited": round(held / (slots * max(low_start, 1e-9)), 3),
        "high_tasks": len(results),
        "results_ok": low[0] == "low" and [r[0] for r in results] == [f"h{i:05d}" for i in range(len(results))],
        "completed_once": done == sorted([*(f"h{i:05d}.done" for i in range(len(results))), "low.done"]),
    }


def run(max_age_s: float, warm_s: float, load_s: float) -> dict:
    from ray_adaptive.local_multinode import start_local_cluster

    lc = start_local_cluster(2, 2)
    try:
        rows = {v: one_variant(v, max_age_s, warm_s, load_s, tempfile.mkdtemp(prefix=f"ra-aging-{v}-"))
                for v in ("aging", "none")}
    finally:
        lc.shutdown()
    return {"nodes": 2, "executors": 4, "high_task_s": 1.0, "max_age_s": max_age_s, "warm_s": warm_s,
            "load_s": load_s, **rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke-test", action="store_true", help="max_age 2 s, 6 s of load")
    ap.add_argument("--max-age-s", type=float, default=5.0)
    ap.add_argument("--warm-s", type=float, default=3.0, help="high load before the low task")
    ap.add_argument("--load-s", type=float, default=None, help="high load after it, at most (3 x max_age)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    max_age = 2.0 if args.smoke_test else args.max_age_s
    load_s = args.load_s if args.load_s is not None else 3 * max_age
    figures = run(max_age, 2.0 if args.smoke_test else args.warm_s, load_s)
    emit(figures, args.out)


if __name__ == "__main__":
    main()
