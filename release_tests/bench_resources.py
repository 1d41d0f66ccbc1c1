"""ESCHER resource API on a local 4-node Ray cluster: set_resource latency, task
throughput with an ephemeral-resource requirement vs plain Ray, and gang
latency vs a Ray placement group of the same shape.

    python release_tests/bench_resources.py [--smoke-test] [--out resources.json]

Figures (all measured in one run, on one cluster):
* ``set_resource``: median and p99 latency of one call (a resize of an
  existing name on a remote node; also creating+deleting a fresh name), and
  one batched call carrying 1,000 names.
* throughput: no-op tasks/s submitted with ``resources={"bench_slot": 1}``
  (a name set on every node) vs the same tasks without it; medians over
  repeats, interleaved, and their ratio.
* gang latency: request -> all 4 members started (each member records its
  start time), for ``esl.Gang([{"CPU": 1}] * 4, "STRICT_SPREAD")`` vs
  ``ray.util.placement_group`` with the same bundles and strategy whose
  members are submitted right away; medians over repeats, and the ratio.
  ESCHER's paper reports 892 ms (library) / 381 ms (monolithic).
"""

from __future__ import annotations

import argparse
import statistics
import time

from _output import emit  # (beside this script: sys.path[0])


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def bench_set_resource(calls: int):
    import ray

    from ray_adaptive.resources import set_resource, set_resources

    head = ray.get_runtime_context().get_node_id()
    remote = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != head)
    set_resource("bench_lat", 1, remote)
    resize = []
    for i in range(calls):
        t = time.perf_counter()
        set_resource("bench_lat", 1 + (i % 2), remote)
        resize.append(time.perf_counter() - t)
    set_resource("bench_lat", 0, remote)
    fresh = []
    for i in range(calls // 2):
        t = time.perf_counter()
        set_resource(f"bench_fresh_{i}", 1, remote)
        set_resource(f"bench_fresh_{i}", 0, remote)
        fresh.append((time.perf_counter() - t) / 2)
    names = {f"bench_batch_{i}": 1 for i in range(1000)}
    t = time.perf_counter()
    set_resources(names, remote)
    batch_create = time.perf_counter() - t
    t = time.perf_counter()
    set_resources({n: 0 for n in names}, remote)
    batch_delete = time.perf_counter() - t
    return {
        "calls": calls,
        "resize_median_ms": round(1e3 * statistics.median(resize), 3),
        "resize_p99_ms": round(1e3 * pct(resize, 0.99), 3),
        "create_or_delete_median_ms": round(1e3 * statistics.median(fresh), 3),
        "create_or_delete_p99_ms": round(1e3 * pct(fresh, 0.99), 3),
        "batch_1000_names_create_ms": round(1e3 * batch_create, 1),
        "batch_1000_names_delete_ms": round(1e3 * batch_delete, 1),
    }


def bench_throughput(tasks: int, repeats: int):
    import ray

    from ray_adaptive.resources import set_resource

    @ray.remote(num_cpus=1)
    def noop():
        return None

    set_resource("bench_slot", 10_000, node_spec={})
    ray.get([noop.remote() for _ in range(200)])  # warm the worker pools
    ray.get([noop.options(resources={"bench_slot": 1}).remote() for _ in range(200)])
    plain, ephemeral = [], []
    for _ in range(repeats):
        for opts, out in (({}, plain), ({"resources": {"bench_slot": 1}}, ephemeral)):
            f = noop.options(**opts) if opts else noop
            t = time.perf_counter()
            ray.get([f.remote() for _ in range(tasks)])
            out.append(tasks / (time.perf_counter() - t))
    set_resource("bench_slot", 0, node_spec={})
    p, e = statistics.median(plain), statistics.median(ephemeral)
    return {
        "tasks": tasks,
        "repeats": repeats,
        "plain_tasks_per_s_median": round(p),
        "ephemeral_tasks_per_s_median": round(e),
        "ratio_ephemeral_over_plain": round(e / p, 3),
        "plain_all": [round(x) for x in plain],
        "ephemeral_all": [round(x) for x in ephemeral],
    }


def bench_gang(repeats: int, members: int):
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    import esl
    from ray_adaptive import resources

    @ray.remote
    def started():
        return time.time()

    bundles = [{"CPU": 1}] * members

    def gang_once():
        t0 = time.time()
        gang = esl.Gang(bundles, strategy="STRICT_SPREAD", timeout_s=30).reserve()
        refs = [gang.submit(i, started) for i in range(members)]
        starts = ray.get(refs)
        latency = max(starts) - t0
        gang.release()
        resources.wait_for_pending(10)
        return latency

    def pg_once():
        t0 = time.time()
        pg = placement_group(bundles, strategy="STRICT_SPREAD")
        refs = [
            started.options(
                num_cpus=1,
                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i),
            ).remote()
            for i in range(members)
        ]
        starts = ray.get(refs)
        latency = max(starts) - t0
        remove_placement_group(pg)
        return latency

    gang_once(), pg_once()  # warm-up (workers, code paths)
    gang, pg = [], []
    for _ in range(repeats):
        gang.append(gang_once())
        time.sleep(0.2)
        pg.append(pg_once())
        time.sleep(0.2)
    g, p = statistics.median(gang), statistics.median(pg)
    return {
        "members": members,
        "repeats": repeats,
        "gang_median_ms": round(1e3 * g, 1),
        "placement_group_median_ms": round(1e3 * p, 1),
        "ratio_gang_over_placement_group": round(g / p, 3),
        "gang_all_ms": [round(1e3 * x, 1) for x in gang],
        "placement_group_all_ms": [round(1e3 * x, 1) for x in pg],
        "escher_paper_ms": {"library": 892, "monolithic": 381},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke-test", action="store_true", help="few calls/tasks, 1-2 repeats")
    ap.add_argument("--out", default=None, help="write the figures to this JSON file")
    ap.add_argument(
        "--report-ms",
        type=int,
        default=0,
        help="raylet_report_resources_period_milliseconds (0: Ray's default, 100)",
    )
    args = ap.parse_args()
    calls, tasks, repeats, gang_repeats = (100, 300, 1, 2) if args.smoke_test else (1000, 2000, 3, 7)

    from ray_adaptive import resources
    from ray_adaptive.local_multinode import start_local_cluster

    config = {"raylet_report_resources_period_milliseconds": args.report_ms} if args.report_ms else None
    lc = start_local_cluster(num_nodes=4, num_cpus=2, system_config=config)
    try:
        figures = {
            "cluster": {"nodes": 4, "cpus_per_node": 2, "report_period_ms": args.report_ms or 100},
            "set_resource": bench_set_resource(calls),
            "throughput": bench_throughput(tasks, repeats),
            "gang": bench_gang(gang_repeats, members=4),
        }
        leaks = resources.created_resources()
        figures["leaked_resources"] = leaks
    finally:
        lc.shutdown()
    emit(figures, args.out)


if __name__ == "__main__":
    main()
