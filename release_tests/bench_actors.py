"""Creating an actor through a policy vs a plain Ray actor, side by side in one run (issue 38).

    python release_tests/bench_actors.py [--smoke-test] [--rounds 30] [--plan centralized] [--out actors.json]

On a 4-node x 2-CPU local cluster, ``least_loaded`` running under ``--plan``,
each round creates one plain Ray actor (``A.remote()``) and one policy actor
(``PA.options(task={}).remote()``), in alternating order, and times each from
the creation call until its first method call answers -- what a user waits
for. The policy side includes the decision, the actor's binding resource
created on its node, and its end watched; both sides start a Ray worker
process per actor, which is most of the time. Every actor is killed at the
end, and the policy's OnFinish for each is awaited. Reported: medians, p90,
the ratio of the medians (target <= 1.5x), and the policy side's ``.remote()``
return time alone (the decision and launch, before the actor runs).
"""

from __future__ import annotations

import argparse
import statistics
import time

from _output import emit  # (beside this script: sys.path[0])


def _pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else None


def run(rounds: int, plan: str) -> dict:
    import ray

    import ray_adaptive as ra
    from ray_adaptive import resources
    from ray_adaptive.local_multinode import start_local_cluster
    from ray_adaptive.runtime.actor_life import actor_stats

    lc = start_local_cluster(4, 2)
    try:
        @ray.remote(num_cpus=0)
        class A:
            def node(self):
                return ray.get_runtime_context().get_node_id()

        rt = ra.start("least_loaded", plan=plan, queue=64)  # (room for every actor of the run)
        PA = ra.policy("least_loaded")(A)
        plain, policy, policy_call, keep = [], [], [], []
        warm = [A.remote(), PA.options(task={}).remote()]  # (the first of each: the watch actor, exports)
        ray.get([h.node.remote() for h in warm])
        keep += warm
        for i in range(rounds):
            for side in (("plain", "policy") if i % 2 == 0 else ("policy", "plain")):
                t0 = time.perf_counter()
                if side == "plain":
                    h = A.remote()
                else:
                    h = PA.options(task={}).remote()
                    policy_call.append(time.perf_counter() - t0)
                ray.get(h.node.remote())
                (plain if side == "plain" else policy).append(time.perf_counter() - t0)
                keep.append(h)
        placed = dict(rt.router.outstanding())
        for h in keep:
            ray.kill(h)
        deadline = time.monotonic() + 60
        while rt.router.outstanding() and time.monotonic() < deadline:
            time.sleep(0.05)
        ended = rt.stats()["finished"]
        ra.shutdown()
        stats = actor_stats("least_loaded")
        deadline = time.monotonic() + 10  # (each end's binding resource is removed by actor_life's thread, which
        while resources.created_resources() and time.monotonic() < deadline:  # may see an end after the router)
            time.sleep(0.05)
        leaked = resources.created_resources()
    finally:
        lc.shutdown()
    med_plain, med_policy = statistics.median(plain), statistics.median(policy)
    return {
        "plan": plan, "rounds": rounds,
        "plain_create_to_ready_s_median": med_plain, "plain_create_to_ready_s_p90": _pct(plain, 0.9),
        "policy_create_to_ready_s_median": med_policy, "policy_create_to_ready_s_p90": _pct(policy, 0.9),
        "ratio_median": med_policy / med_plain,
        "policy_remote_returns_s_median": statistics.median(policy_call),
        "policy_remote_returns_s_p90": _pct(policy_call, 0.9),
        "actors_per_node": sorted(placed.values()),
        "policy_actors_ended": ended, "policy_actors": rounds + 1,
        "lifetime_s_median": statistics.median(stats.lifetimes_s) if stats.lifetimes_s else None,
        "leaked_resources": leaked,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke-test", action="store_true", help="a few rounds only")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--plan", default="centralized")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    figures = run(4 if args.smoke_test else args.rounds, args.plan)
    emit(figures, args.out)


if __name__ == "__main__":
    main()
