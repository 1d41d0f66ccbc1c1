"""Co-location with ESCHER ephemeral resources, on a local 4-node Ray cluster.

Run:  python examples/esl_colocation.py

Three groups of tasks; each group runs on one node, chosen by the library
(the node with most free CPU) or fixed by the caller. Prints where each task
ran, then removes every resource it created and shuts the cluster down.
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
def work(group, i):
    time.sleep(0.2)
    return group, i, ray.get_runtime_context().get_node_id()


def main():
    cluster, root = start_cluster()
    try:
        nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        with esl.CoLocation() as colo:
            refs = [work.options(**colo.group("A", res_req={"CPU": 1})).remote("A", i) for i in range(3)]
            refs += [work.options(**colo.group("B", res_req={"CPU": 1})).remote("B", i) for i in range(3)]
            refs += [
                work.options(**colo.group("C", res_req={"CPU": 1}, node=nodes[-1])).remote("C", i)
                for i in range(2)
            ]
            for group, i, node in ray.get(refs):
                print(f"group {group} task {i} ran on node {node[:12]}")
            for group in "ABC":
                print(f"group {group} lives on {colo.node_of(group)[:12]}")
        print("left behind:", resources.created_resources() or "nothing")
    finally:
        resources.cleanup()
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
