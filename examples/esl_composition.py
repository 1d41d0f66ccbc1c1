"""Policy composition (the ESCHER slides): load-balanced pairs of co-located tasks.

Run:  python examples/esl_composition.py

Each pair is a leader and a follower. Leaders are load balanced (one per
node); a leader makes its node the home of its pair (`CoLocation.join_here`)
and the follower, submitted at the same time, waits for that and runs there.
No resource-to-policy bookkeeping in the application: the ESLs keep it.
"""

import time

import ray

import esl
from ray_adaptive import resources
from ray_adaptive.local_multinode import start_local_cluster



@ray.remote(num_cpus=1)
def leader(pair, token):
    node = esl.CoLocation.join_here(token)
    time.sleep(0.5)
    return f"pair {pair} leader", node


@ray.remote(num_cpus=1)
def follower(pair):
    return f"pair {pair} follower", ray.get_runtime_context().get_node_id()


def main():
    lc = start_local_cluster(num_nodes=4, num_cpus=2)
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
        lc.shutdown()


if __name__ == "__main__":
    main()
