"""Policy composition (the ESCHER slides): load-balanced pairs of co-located tasks.

Run:  python examples/esl_composition.py

Each pair is a leader and a follower. Leaders are load balanced (one per
node); a leader makes its node the home of its pair (`CoLocation.join_here`)
and the follower, submitted at the same time, waits for that and runs there.
No resource-to-policy bookkeeping in the application: the ESLs keep it.
"""

import os
import shutil
import tempfile
import time

import ray
from ray.cluster_utils import Cluster

import esl
from ray_adaptive import resources


def start_cluster(num_nodes=4, cpus=2):
    """A local multi-node Ray cluster in its own temp dir (metrics off: clean shutdown)."""
    root = tempfile.mkdtemp(prefix="esl-example-", dir="/tmp")
    os.makedirs(os.path.join(root, "ray"))
    os.environ["RAY_TMPDIR"] = root
    cluster = Cluster(
        initialize_head=True,
        head_node_args=dict(
            num_cpus=cpus,
            temp_dir=os.path.join(root, "ray"),
            include_dashboard=False,
            _system_config={"enable_metrics_collection": False},
        ),
    )
    for _ in range(num_nodes - 1):
        cluster.add_node(num_cpus=cpus, temp_dir=os.path.join(root, "ray"))
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    return cluster, root


@ray.remote(num_cpus=1)
def leader(pair, token):
    node = esl.CoLocation.join_here(token)
    time.sleep(0.5)
    return f"pair {pair} leader", node


@ray.remote(num_cpus=1)
def follower(pair):
    return f"pair {pair} follower", ray.get_runtime_context().get_node_id()


def main():
    cluster, root = start_cluster()
    pairs = 4
    try:
        with esl.LoadBalance(num_tasks=pairs) as lb, esl.CoLocation() as colo:
            refs = []
            for p in range(pairs):
                refs.append(leader.options(**lb.options()).remote(p, colo.token(f"pair{p}")))
                refs.append(follower.options(**colo.follow(f"pair{p}", {"CPU": 1})).remote(p))
            for who, node in ray.get(refs):
                print(f"{who} ran on node {node[:12]}")
        print("left behind:", resources.created_resources() or "nothing")
    finally:
        resources.cleanup()
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
