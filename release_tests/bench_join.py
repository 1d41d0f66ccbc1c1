"""A node joining a running policy: how soon it is in force and gets its first task, with and without a spare.

    python release_tests/bench_join.py [--smoke-test] [--repeats 3] [--out join.json]

On a local cluster of 3 nodes x 2 CPUs, DRF-LB under a steady load from one
driver thread (executors=1, queue=2, so every node is kept busy), a node of
2 CPUs is added; measured from the moment the GCS says it is alive:

* ``in_force_s``: until the driver's router follows the switch that put it
  in the node list (the owner's node watch looks every 0.5 s, then a live
  switch to the same plan);
* ``first_task_s``: until the first task body runs on it (includes Ray
  starting that task's worker on the new node);
* ``build_s``: the switch's time starting its generation's actors.

Each plan is run ``--repeats`` times with the spare generation
(``runtime/spare.py``: the next generation's actors started ahead) and as
many times without it (``rt.spares.delay_s`` set to infinity), alternated in
one run; medians reported. The node is removed after each repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time

PLANS = ("centralized", "decentralized", "hybrid")


def _alive(node_id: str) -> bool:
    import ray

    return any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes())


def _one(lc, plan: str, spare: bool) -> dict:
    import ray

    import ray_adaptive as ra

    @ray.remote(num_cpus=1)
    def marked(folder: str, i: int) -> int:
        node = ray.get_runtime_context().get_node_id()
        open(os.path.join(folder, f"t{i}-{node}"), "x").close()
        time.sleep(0.02)
        return i

    folder = tempfile.mkdtemp(prefix="ra-join-")
    rt = ra.start("drf_lb", plan=plan, executors=1, queue=2)
    if not spare:
        rt.spares.delay_s = float("inf")
    fn = ra.policy("drf_lb")(marked).options(task={"tenant": "a", "resource_vec": [1.0, 0.5, 0.0]})
    stop, refs = threading.Event(), []

    def load() -> None:
        i = 0
        while not stop.is_set():
            refs.append(fn.remote(folder, i))
            i += 1

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    node = None
    try:
        time.sleep(3.0)  # (a generation in force 2 s has its spare)
        if spare:
            deadline = time.monotonic() + 30
            while rt.spares.generation != rt.topology.generation + 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            rt.spares.wait_ready()
        node = lc.cluster.add_node(num_cpus=2)
        while not _alive(node.node_id):
            time.sleep(0.005)
        t0 = time.monotonic()
        in_force = first = None
        while first is None or in_force is None:
            now = time.monotonic() - t0
            if in_force is None and any(n.id == node.node_id for n in rt.topology.nodes):
                in_force = now
            if first is None and any(node.node_id in f for f in os.listdir(folder)):
                first = now
            if now > 60:
                raise RuntimeError(f"{plan}: no task on the new node in 60 s")
            time.sleep(0.005)
        entry = next(h for h in rt.history if "joined" in h["reason"])
        return {"plan": plan, "spare": spare, "in_force_s": in_force, "first_task_s": first,
                "build_s": entry["build_s"], "from_spare": entry["from_spare"], "freeze_s": entry["freeze_s"]}
    finally:
        stop.set()
        thread.join(30)
        ray.get(refs, timeout=300)
        ra.shutdown()
        if node is not None:
            lc.cluster.remove_node(node)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--plans", default=",".join(PLANS))
    ap.add_argument("--smoke-test", action="store_true", help="one repeat of the centralized plan each way")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    plans = ["centralized"] if args.smoke_test else args.plans.split(",")
    repeats = 1 if args.smoke_test else args.repeats

    from ray_adaptive.local_multinode import start_local_cluster

    lc = start_local_cluster(3, 2, quiet=True)
    runs = []
    try:
        for plan in plans:
            for _ in range(repeats):
                for spare in (True, False):
                    runs.append(_one(lc, plan, spare))
                    print(json.dumps(runs[-1]), flush=True)
    finally:
        lc.shutdown()
    summary = {}
    for plan in plans:
        for spare in (True, False):
            rs = [r for r in runs if r["plan"] == plan and r["spare"] == spare]
            summary[f"{plan}/{'spare' if spare else 'no spare'}"] = {
                k: statistics.median(r[k] for r in rs) for k in ("in_force_s", "first_task_s", "build_s")}
    print(f"{'plan':<28}{'in force':>10}{'first task':>12}{'build':>8}   (medians, s)")
    for key, med in summary.items():
        print(f"{key:<28}{med['in_force_s']:>10.2f}{med['first_task_s']:>12.2f}{med['build_s']:>8.2f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"runs": runs, "medians": summary}, f, indent=1)


if __name__ == "__main__":
    main()
