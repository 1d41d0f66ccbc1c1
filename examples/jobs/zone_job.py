"""A Ray job that runs a policy: zone_affinity over the zones the cluster's node labels give.

Submit it to a cluster brought up from ``examples/clusters/`` (the head's
dashboard, port 8265; ``ray attach`` or a port forward reaches it)::

    ray job submit --address http://HEAD:8265 --working-dir examples/jobs -- python zone_job.py --tasks 40

The job connects to its cluster (``ray.init()`` reads the address the job
server gives it), starts the policy -- its actors and each node's slot
resources are created now, by this driver; nothing of ray-adaptive ran on the
nodes before -- runs policy-decorated tasks for every zone the nodes are
labelled with, checks that each ran in its zone, prints one JSON line of
figures and stops the policy (the tasks' results stay owned by this job).
Exit 1 if a task ran outside its zone.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

import ray

import ray_adaptive as ra


@ra.policy("zone_affinity")
@ray.remote(num_cpus=1)
def where(i: int) -> tuple[int, str]:
    """Task ``i`` reports the node it ran on."""
    return i, ray.get_runtime_context().get_node_id()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=40, help="tasks per zone")
    args = ap.parse_args(argv)
    ray.init()  # the job's cluster: the job server sets RAY_ADDRESS
    zone_of = {n["NodeID"]: (n.get("Labels") or {}).get("zone") for n in ray.nodes() if n["Alive"]}
    zones = sorted({z for z in zone_of.values() if z})
    if not zones:
        print("no node has a zone label (ray start --labels zone=...): see examples/clusters/", file=sys.stderr)
        return 1
    rt = ra.start("zone_affinity")  # the compiler's plan for this cluster; node zones from the labels
    try:
        refs = {z: [where.options(task={"zone": z}).submit(i) for i in range(args.tasks)] for z in zones}
        ran = {z: ray.get([f.result() for f in fs]) for z, fs in refs.items()}
    finally:
        ra.shutdown()  # (waits until the runtime has seen every dispatched task finish: its counts are final)
    misplaced = sum(zone_of[node] != z for z, out in ran.items() for _, node in out)
    in_order = all([i for i, _ in out] == list(range(args.tasks)) for out in ran.values())
    print(json.dumps({
        "plan": rt.plan.name, "nodes": len(zone_of), "zones": zones, "tasks": args.tasks * len(zones),
        "misplaced": misplaced, "results_in_order": in_order,
        "nodes_used": {z: len(Counter(node for _, node in out)) for z, out in ran.items()},
        "stats": {k: v for k, v in rt.stats().items() if k in ("submitted", "dispatched", "finished")},
    }))
    return 0 if misplaced == 0 and in_order else 1


if __name__ == "__main__":
    sys.exit(main())
