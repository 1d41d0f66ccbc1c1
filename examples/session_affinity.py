"""A session's actor kept on the node that holds its cache, by the ``locality`` policy (issue 38).

Run:  python examples/session_affinity.py

Each chat session gets an actor that keeps the session's cache (say, an
LLM's KV cache) on its node. Sessions come and go: an idle session's actor
is removed, and when the user comes back a new actor is created for it. The
shipped ``locality`` policy (policies/locality.policy) remembers in State
the node that last served each key (``home[task.key]``) and sends the key's
next actor there -- where its cache still is -- while a new key goes to the
least-loaded node. Prints where each session's actor went, the first time
and when it came back.

``run()`` does the work on a connected cluster (the tests call it on
theirs); ``main()`` starts a local 4-node cluster for it.
"""

from __future__ import annotations

import time

import ray

import ray_adaptive as ra


@ray.remote(num_cpus=0)
class Session:
    def __init__(self, user):
        self.user = user
        self.cache = {}  # (what would be worth keeping where it is)

    def chat(self, text):
        self.cache[len(self.cache)] = text
        return self.user, ray.get_runtime_context().get_node_id(), len(self.cache)


def run() -> dict:
    """Three sessions, each ended and resumed; returns user -> [node of its first actor, of its second]."""
    rt = ra.start("locality", plan="centralized")
    session = ra.policy("locality")(Session)
    users = ["alice", "bob", "carol"]
    homes: dict = {u: [] for u in users}
    try:
        actors = {u: session.options(task={"key": u}).remote(u) for u in users}
        for u, a in actors.items():
            _, node, _ = ray.get(a.chat.remote("hello"))
            homes[u].append(node)
            print(f"{u}: session actor placed on node {node[:12]}")
        for u, a in actors.items():  # every session idles out: its actor goes (OnFinish)
            ray.kill(a)
        deadline = time.monotonic() + 30
        while rt.router.outstanding() and time.monotonic() < deadline:
            time.sleep(0.05)
        for u in reversed(users):  # the users come back, in another order
            a = session.options(task={"key": u}).remote(u)
            _, node, _ = ray.get(a.chat.remote("again"))
            homes[u].append(node)
            print(f"{u}: back, its new session actor placed on node {node[:12]} "
                  f"({'the same node: its cache is there' if node == homes[u][0] else 'another node'})")
            ray.kill(a)
        deadline = time.monotonic() + 30
        while rt.router.outstanding() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        ra.shutdown()
    return homes


def main() -> None:
    from ray_adaptive.local_multinode import start_local_cluster

    lc = start_local_cluster(num_nodes=4, num_cpus=2)
    try:
        run()
    finally:
        lc.shutdown()


if __name__ == "__main__":
    main()
