"""Load balancing with ESCHER ephemeral resources, on a local 4-node Ray cluster.

Run:  python examples/esl_load_balancing.py

Static (the ESCHER slides): a resource on every node with capacity
floor/ceil(tasks / nodes), so 10 concurrent tasks land 3/3/2/2. Dynamic:
each task goes to the node with fewest of this balancer's tasks right now.
Prints where each task ran, cleans up, shuts the cluster down.
"""

import time

import ray

import esl
from ray_adaptive import resources
from ray_adaptive.local_multinode import start_local_cluster



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
    lc = start_local_cluster(num_nodes=4, num_cpus=2)
    try:
        with esl.LoadBalance(num_tasks=10) as lb:
            report("static", ray.get([work.options(**lb.options()).remote(i) for i in range(10)]))
            print("static capacities:", {n[:12]: c for n, c in lb.capacities.items()})
        with esl.LoadBalance(dynamic=True) as lb:
            report("dynamic", ray.get([lb.submit(work, i) for i in range(7)]))
        print("left behind:", resources.created_resources() or "nothing")
    finally:
        lc.shutdown()


if __name__ == "__main__":
    main()
