"""Load balancing with ESCHER ephemeral resources, on a local 4-node Ray cluster.

Run:  python examples/esl_load_balancing.py

Static (the ESCHER slides): a resource on every node with capacity
floor/ceil(tasks / nodes), so 10 concurrent tasks land 3/3/2/2. Dynamic:
each task goes to the node with fewest of this balancer's tasks right now.
Prints where each task ran, cleans up, shuts the cluster down.
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
def work(i):
    time.sleep(0.5)
    return i, ray.get_runtime_context().get_node_id()


def report(title, results):
    from collections import Counter

    for i, node in results:
        print(f"{title}: task {i} ran on node {node[:12]}")
    print(f"{title}: tasks per node {sorted(Counter(n[:12] for _, n in results).values())}")


def main():
    cluster, root = start_cluster()
    try:
        with esl.LoadBalance(num_tasks=10) as lb:
            report("static", ray.get([work.options(**lb.options()).remote(i) for i in range(10)]))
            print("static capacities:", {n[:12]: c for n, c in lb.capacities.items()})
        with esl.LoadBalance(dynamic=True) as lb:
            report("dynamic", ray.get([lb.submit(work, i) for i in range(7)]))
        print("left behind:", resources.created_resources() or "nothing")
    finally:
        resources.cleanup()
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
