"""Co-location with ESCHER ephemeral resources, on a local 4-node Ray cluster.

Run:  python examples/esl_colocation.py

Three groups of tasks; each group runs on one node, chosen by the library
(the node with most free CPU) or fixed by the caller. Prints where each task
ran, then removes every resource it created and shuts the cluster down.
"""

import time

import ray

import esl
from ray_adaptive import resources
from ray_adaptive.local_multinode import start_local_cluster



@ray.remote(num_cpus=1)
def work(group, i):
    time.sleep(0.2)
    return group, i, ray.get_runtime_context().get_node_id()


def main():
    lc = start_local_cluster(num_nodes=4, num_cpus=2)
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
        lc.shutdown()


if __name__ == "__main__":
    main()
