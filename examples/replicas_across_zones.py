"""Replica actors spread over zones by a policy, scaled up and down while requests run (issue 38).

Run:  python examples/replicas_across_zones.py

A small serving deployment: N replicas of a model server, each a Ray actor
placed by a policy that puts the next replica in the zone with the fewest
replicas (the least-loaded node there). The zones are Ray node labels
(``zone``), read by the policy as its ``Node:`` field. A client thread sends
requests round-robin to whatever replicas exist while the deployment scales
4 -> 6 -> 3 -> 5; a replica removed (``ray.kill``) gives its zone's place
back through the policy's OnFinish, so the next one goes there. Prints where
each replica went and how many requests each served.

``run()`` does the work on a connected cluster whose nodes carry a ``zone``
label (the tests call it on theirs); ``main()`` starts a local 4-node cluster,
zones "a" and "b", for it.
"""

from __future__ import annotations

import collections
import threading
import time

import ray

import ray_adaptive as ra
from ray_adaptive.dsl import parse_policy

SPREAD = """
// The zone with the fewest replicas first, then the least-loaded node in it.
Node:
  zone: string

State:
  replicas: map<string, int>   // zone -> replicas placed there

Score(task, node):
  return replicas[node.zone] * 1000 + get_load(node)

OnDispatch(task, node):
  replicas[node.zone] += 1

OnFinish(task, node):
  replicas[node.zone] -= 1
"""


@ray.remote(num_cpus=0)
class Replica:
    def __init__(self, name):
        self.name, self.served = name, 0

    def where(self):
        ctx = ray.get_runtime_context()
        return self.name, ctx.get_node_id()

    def infer(self, x):
        self.served += 1
        return x * 2

    def count(self):
        return self.name, self.served


def run(zones_of: dict) -> dict:
    """The deployment on the connected cluster; ``zones_of``: node id -> zone. Returns zone -> replicas at
    each step."""
    rt = ra.start(parse_policy(SPREAD, name="spread_zones"), plan="centralized")
    deployment = ra.policy("spread_zones")(Replica)
    replicas: list = []
    lock = threading.Lock()
    stop = threading.Event()
    served = collections.Counter()

    def client():
        i = 0
        while not stop.is_set():
            with lock:
                live = list(replicas)
            if not live:
                time.sleep(0.01)
                continue
            try:
                ray.get(live[i % len(live)].infer.remote(i), timeout=10)
                served["ok"] += 1
            except ray.exceptions.RayActorError:
                served["to a removed replica"] += 1
            i += 1

    def scale_to(n: int, step: str) -> dict:
        with lock:
            while len(replicas) > n:  # the newest go first
                ray.kill(replicas.pop())
        while len(replicas) < n:
            r = deployment.options(task={}).remote(f"replica-{time.monotonic_ns() % 10**6}")
            name, node = ray.get(r.where.remote())
            print(f"{step}: {name} placed on node {node[:12]} (zone {zones_of[node]})")
            with lock:
                replicas.append(r)
        time.sleep(0.3)  # (requests run meanwhile)
        with lock:
            where = ray.get([r.where.remote() for r in replicas])
        per_zone = collections.Counter(zones_of[node] for _, node in where)
        print(f"{step}: {n} replicas, per zone {dict(sorted(per_zone.items()))}")
        return dict(per_zone)

    thread = threading.Thread(target=client, daemon=True)
    thread.start()
    steps = {}
    try:
        for n, step in ((4, "up to 4"), (6, "up to 6"), (3, "down to 3"), (5, "up to 5")):
            steps[step] = scale_to(n, step)
    finally:
        stop.set()
        thread.join(15)
        counts = ray.get([r.count.remote() for r in replicas])
        for name, k in counts:
            print(f"{name} served {k} requests")
        print(f"requests: {dict(served)}")
        for r in replicas:
            ray.kill(r)
        deadline = time.monotonic() + 30
        while rt.router.outstanding() and time.monotonic() < deadline:  # every replica's OnFinish applied
            time.sleep(0.05)
        ra.shutdown()
    return steps


def main() -> None:
    from ray_adaptive.local_multinode import start_local_cluster

    zones = ["a", "a", "b", "b"]
    lc = start_local_cluster(num_nodes=4, num_cpus=2, node_labels=[{"zone": z} for z in zones])
    try:
        run(dict(zip(lc.node_ids, zones)))
    finally:
        lc.shutdown()


if __name__ == "__main__":
    main()
