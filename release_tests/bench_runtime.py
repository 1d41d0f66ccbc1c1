"""Policy-driven dispatch throughput vs plain Ray tasks, on one local cluster, in one run.

    python release_tests/bench_runtime.py [--smoke-test] [--out runtime.json]

No-op tasks (num_cpus=1) on a 4-node x 2-CPU local cluster. For each plan
(centralized: selector actor; decentralized: decisions in the submitting
process; hybrid: selector + placement actors) and policy, the driver
submits in a loop -- ``.remote()`` and ``.submit()`` (a Future of the ref,
so a remote plan batches) -- and the ratio is its tasks/s over plain
``@ray.remote`` tasks/s measured alternately in the same run (median of
repeats). Also the decision latency p50/p99 of the deciding scheduler.

A second baseline, *gated plain Ray*, is the cheapest dispatcher that keeps
the cluster model's bounded node queues: plain tasks bound to the nodes'
slots, at most ``executors + queue`` outstanding per node, the next one
launched as completions free room (seen as the router sees them: one
``ray.wait`` over what runs), no policy at all, in the caller's thread. Ray's owner returns
a leased worker the moment its queue of that task shape is empty
(``NormalTaskSubmitter::OnWorkerIdle``), so shallow node queues pay a new
lease (and a spillback) for many tasks whatever decides them: this is the
ceiling for any bounded-queue binding, and ``ratio_to_gated`` is what the
policy itself costs.

Also the submitting process's CPU per task (every thread of it, from
``time.process_time()``), for each loop: on a machine the cluster saturates,
the driver's CPU is taken from the workers, and it varies far less between
runs than the throughput ratio does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

VEC = [0.1, 0.2, 0.1]
FIELDS = {"least_loaded": {}, "drf_lb": {"tenant": "a", "resource_vec": VEC}, "round_robin": {}, "fifo": {}}


def plain_loop(fn, tasks: int) -> None:
    import ray

    ray.get([fn.remote(i) for i in range(tasks)])


def gated_loop(fn, slots: dict, depth: int, queue: int, tasks: int) -> None:
    """Plain tasks bound to slots, at most ``depth`` outstanding per node, no policy; with no
    room, one ``ray.wait`` over what runs waits for queue/2 of them to finish, as the router does."""
    import ray

    bound = [fn.options(resources={slot: 1}) for slot in slots.values()]
    room = [depth] * len(bound)
    running: dict = {}  # ObjectRef -> node index
    refs, k = [], 0
    for t in range(tasks):
        while not any(room):
            ready, _ = ray.wait(list(running), num_returns=min(max(1, queue // 2), len(running)),
                                timeout=0.005, fetch_local=False)
            for r in ready:
                room[running.pop(r)] += 1
        while not room[k % len(bound)]:
            k += 1
        i = k % len(bound)
        room[i] -= 1
        k += 1
        ref = bound[i].remote(t)
        running[ref] = i
        refs.append(ref)
    ray.get(refs)


def policy_loop(fn, policy: str, fields: dict, how: str, tasks: int):
    """A loop of ``tasks`` submissions of ``fn`` decorated with ``policy``: ``.remote()`` in a loop, as
    users write it, or ``.submit()`` then every Future's result; returns the refs."""
    import ray_adaptive as ra

    f = ra.policy(policy)(fn).options(task=fields) if fields else ra.policy(policy)(fn)
    if how == "remote":
        return lambda: [f.remote(i) for i in range(tasks)]
    return lambda: [x.result() for x in [f.submit(i) for i in range(tasks)]]


def _within(seconds: float, loop, runtime):
    """``loop()``'s result; if it is still running after ``seconds``, print what a hang needs
    (every thread's stack, the runtime's counts and queues) and exit 3 instead of hanging."""
    import faulthandler
    import os
    import sys
    import threading

    box = []
    thread = threading.Thread(target=lambda: box.append(loop()), daemon=True)
    thread.start()
    thread.join(seconds)
    if not thread.is_alive():
        return box[0]
    print(f"HUNG: a submission loop ran over {seconds:g} s; every thread's stack:", flush=True)
    faulthandler.dump_traceback(file=sys.stdout, all_threads=True)  # first: it takes no lock
    router = runtime().router  # (read without its locks: one of them may be what hangs)
    print(f"runtime: {router.stats}; tasks in the router {len(router._tasks)}, undecided "
          f"{sum(t.node is None for t in list(router._tasks.values()))}, launched, not harvested {len(router._launched)}",
          flush=True)
    os._exit(3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke-test", action="store_true", help="few tasks, 1 repeat")
    ap.add_argument("--out", default=None, help="write the figures to this JSON file")
    ap.add_argument("--queue", type=int, default=2, help="per-node queue of the cluster model (slots = CPUs + queue)")
    ap.add_argument("--policies", default="least_loaded,drf_lb")
    ap.add_argument("--plans", default="decentralized,centralized,hybrid")
    ap.add_argument("--hang-after-s", type=float, default=120.0,
                    help="a submission loop still running after this long is reported (every thread's stack, "
                         "the runtime's counts and queues) and the benchmark exits with status 3")
    args = ap.parse_args()
    tasks, repeats = (300, 1) if args.smoke_test else (2000, 5)

    import ray

    import ray_adaptive as ra
    from ray_adaptive.local_multinode import local_cluster

    @ray.remote(num_cpus=1)
    def noop(i):
        return i

    def timed(loop) -> tuple:
        """(tasks/s, this process's CPU us per task) of ``loop()``."""
        cpu, start = time.process_time(), time.perf_counter()
        loop()
        return tasks / (time.perf_counter() - start), 1e6 * (time.process_time() - cpu) / tasks

    def plain() -> None:
        ray.get([noop.remote(i) for i in range(tasks)])

    def gated(slots: dict, depth: int) -> None:
        """Plain tasks bound to slots, at most ``depth`` outstanding per node, no policy; with no
        room, one ``ray.wait`` over what runs waits for queue/2 of them to finish, as the router does."""
        bound = [noop.options(resources={slot: 1}) for slot in slots.values()]
        room = [depth] * len(bound)
        running: dict = {}  # ObjectRef -> node index
        refs, k = [], 0
        for t in range(tasks):
            while not any(room):
                ready, _ = ray.wait(list(running), num_returns=min(max(1, args.queue // 2), len(running)),
                                    timeout=0.005, fetch_local=False)
                for r in ready:
                    room[running.pop(r)] += 1
            while not room[k % len(bound)]:
                k += 1
            i = k % len(bound)
            room[i] -= 1
            k += 1
            ref = bound[i].remote(t)
            running[ref] = i
            refs.append(ref)
        ray.get(refs)

    def through(policy: str, fields: dict, how: str) -> None:
        fn = ra.policy(policy)(noop).options(task=fields) if fields else ra.policy(policy)(noop)
        if how == "remote":
            submit = lambda: [fn.remote(i) for i in range(tasks)]  # .remote() in a loop, as users write it
        else:
            submit = lambda: [f.result() for f in [fn.submit(i) for i in range(tasks)]]
        refs = _within(args.hang_after_s, submit, lambda: ra.runtime_of(policy))
        ray.get(refs)

    figures = {"tasks": tasks, "repeats": repeats, "queue": args.queue, "executors": 2, "cluster": "4 nodes x 2 CPUs (local)", "runs": []}
    with local_cluster(num_nodes=4, num_cpus=2):
        ray.get([noop.remote(i) for i in range(200)])  # warm the workers
        fields_of = {"least_loaded": {}, "drf_lb": {"tenant": "a", "resource_vec": VEC}}
        for plan in args.plans.split(","):
            for policy in args.policies.split(","):
                fields = fields_of[policy]
                rt = ra.start(policy, plan=plan, queue=args.queue)
                depth = 2 + args.queue  # executors + queue per node
                for how in ("remote", "submit"):
                    plain_rates, gated_rates, policy_rates = [], [], []
                    cpu = {"plain": [], "gated": [], "policy": []}
                    through(policy, fields, how)  # warm up this shape's leases
                    for _ in range(repeats):
                        for rates, name, loop in ((plain_rates, "plain", plain),
                                                  (gated_rates, "gated", lambda: gated(rt.slots, depth)),
                                                  (policy_rates, "policy", lambda: through(policy, fields, how))):
                            rate, us = timed(loop)
                            rates.append(rate)
                            cpu[name].append(us)
                    ratios = [p / b for p, b in zip(policy_rates, plain_rates)]
                    gated_ratios = [p / b for p, b in zip(policy_rates, gated_rates)]
                    stats = rt.stats()
                    f = {
                        "plan": rt.plan.name, "policy": policy, "loop": f".{how}()",
                        "plain_tasks_per_s": round(statistics.median(plain_rates)),
                        "policy_tasks_per_s": round(statistics.median(policy_rates)),
                        "gated_plain_tasks_per_s": round(statistics.median(gated_rates)),
                        "ratio_median": round(statistics.median(ratios), 3),
                        "gated_plain_ratio_median": round(statistics.median(
                            [g / b for g, b in zip(gated_rates, plain_rates)]), 3),
                        "ratio_to_gated_median": round(statistics.median(gated_ratios), 3),
                        "decision_p50_us": round(stats["decision_p50_s"] * 1e6, 1),
                        "decision_p99_us": round(stats["decision_p99_s"] * 1e6, 1),
                        **{f"driver_cpu_us_per_task_{k}": round(statistics.median(v)) for k, v in cpu.items()},
                    }
                    figures["runs"].append(f)
                    print(f"{f['plan']:>26} {policy:>13} {f['loop']:>9}: {f['policy_tasks_per_s']} tasks/s vs plain "
                          f"{f['plain_tasks_per_s']} -> {f['ratio_median']}x (gated plain {f['gated_plain_ratio_median']}x; "
                          f"policy/gated {f['ratio_to_gated_median']}x); decision p50 {f['decision_p50_us']} us, "
                          f"p99 {f['decision_p99_us']} us; driver CPU per task {f['driver_cpu_us_per_task_policy']} us "
                          f"(plain {f['driver_cpu_us_per_task_plain']}, gated {f['driver_cpu_us_per_task_gated']})",
                          flush=True)
                ra.shutdown()
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(figures, fh, indent=2)


if __name__ == "__main__":
    main()
