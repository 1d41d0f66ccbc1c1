"""The runtime on a real 4-node cluster: placement, exactly-once, fairness, errors.

These run the decentralized plan (decisions in the submitting process; with
one submitting process its State and loads are exact);
tests/test_runtime_plans.py runs every architecture.
"""

import collections
import time

import pytest
import ray

import ray_adaptive as ra
from ray_adaptive import resources
from tests.conftest import wait_for

VEC = [0.1, 0.2, 0.1]

POLICY_WITH_INT_ZONE = """\
Task:
  zone: int

Node:
  zone: int
  rack: string

Score(task, node):
  if task.zone != node.zone:
    return inf
  return get_load(node)
"""


@ray.remote(num_cpus=1)
def where(x, sleep=0.0):
    start = time.time()
    time.sleep(sleep)  # (the task's work: how long it holds its slot)
    return x, ray.get_runtime_context().get_node_id(), start


PLAN = "decentralized"


def start(policy, **kwargs):
    return ra.start(policy, plan=PLAN, **kwargs)


@pytest.fixture
def running(ray_cluster):
    """Start policies through this; everything is shut down after the test."""
    yield start
    ra.shutdown()
    assert resources.created_resources() == {}


def test_least_loaded_spreads_evenly_and_results_are_exact(running, ray_cluster):
    running("least_loaded", queue=0)  # 2 CPUs per node: 2 executors each
    fn = ra.policy("least_loaded")(where)
    refs = [fn.remote(i, 0.5) for i in range(8)]
    out = ray.get(refs)
    assert [x for x, _, _ in out] == list(range(8))
    per_node = collections.Counter(node for _, node, _ in out)
    assert sorted(per_node.values()) == [2, 2, 2, 2] and set(per_node) == set(ray_cluster.node_ids)


def test_every_task_runs_exactly_once(running):
    rt = running("round_robin", queue=2)
    fn = ra.policy("round_robin")(where)
    futures = [fn.submit(i) for i in range(200)]  # a backlog far larger than the 16 slots
    out = ray.get([f.result(timeout=60) for f in futures])
    assert sorted(x for x, _, _ in out) == list(range(200))
    wait_for(lambda: rt.stats()["finished"] >= 200, timeout=10, message=lambda: f"200 finishes harvested: {rt.stats()}")
    s = rt.stats()
    assert (s["submitted"], s["dispatched"], s["finished"], s["pending"]) == (200, 200, 200, 0)


def test_drf_lb_gives_backlogged_tenants_equal_service(running):
    running("drf_lb", executors=1, queue=0)  # 4 slots, 4 tenants: DRF's equal shares are one slot each
    fn = ra.policy("drf_lb")(where)
    futures = []
    for i in range(72):  # greedy submits 3x each other tenant, and first
        tenant = "greedy" if i < 36 else "abc"[i % 3]
        futures.append((tenant, fn.options(task={"tenant": tenant, "resource_vec": VEC}).submit(i, 0.05)))
    out = [(tenant, ray.get(f.result(timeout=60))) for tenant, f in futures]
    starts = [tenant for tenant, _ in sorted(out, key=lambda o: o[1][2])]
    # (with 3 tenants on 4 slots one tenant holds 2, and the tie rule -- earlier arrival -- gives
    # them to greedy every time: 18 of 36, the policy's due, and no test of fairness)
    served = collections.Counter(starts[4:40])  # all four backlogged; FIFO would serve greedy 32
    assert set(served) == {"greedy", "a", "b", "c"}
    assert max(served.values()) - min(served.values()) <= 3, (served, starts)


def test_zone_affinity_places_only_on_matching_nodes(running, ray_cluster):
    # node_fields= overrides the nodes' Ray labels (zone a on the first half, b on the rest)
    zones = {n: ("a" if i in (0, 3) else "b") for i, n in enumerate(ray_cluster.node_ids)}
    running("zone_affinity", node_fields={n: {"zone": z} for n, z in zones.items()})
    fn = ra.policy("zone_affinity")(where)
    out = ray.get([fn.options(task={"zone": "b"}).remote(i) for i in range(12)])
    assert {node for _, node, _ in out} == {n for n, z in zones.items() if z == "b"}


def test_node_fields_come_from_the_nodes_ray_labels(running, ray_cluster):
    running("zone_affinity")  # no node_fields: ray start --labels zone=... says it
    labels = {n["NodeID"]: n["Labels"]["zone"] for n in ray.nodes() if n["Alive"]}
    fn = ra.policy("zone_affinity")(where)
    out = ray.get([fn.options(task={"zone": "b"}).remote(i) for i in range(12)])
    assert {node for _, node, _ in out} == {n for n, z in labels.items() if z == "b"}


def test_a_label_that_is_not_the_fields_type_is_named(ray_cluster, tmp_path):
    path = tmp_path / "zone_count.policy"
    path.write_text(POLICY_WITH_INT_ZONE)
    with pytest.raises(TypeError, match=r"Ray label zone='[ab]' cannot be read as int .*Node field 'zone'"):
        ra.start(str(path))
    with pytest.raises(TypeError, match=r"field 'rack' \(string\) is missing; pass it in node_fields= or label"):
        ra.start(str(path), node_fields={n: {"zone": 1} for n in ray_cluster.node_ids})


def test_object_refs_flow_like_plain_ray(running):
    running("fifo")

    @ra.policy("fifo")
    @ray.remote(num_cpus=1)
    def double(x):
        return 2 * x

    @ra.policy("fifo")
    @ray.remote(num_cpus=1)
    def fail():
        raise ValueError("boom")

    ref = double.remote(double.remote(5))  # an ObjectRef as an argument
    assert isinstance(ref, ray.ObjectRef) and ray.get(ref) == 20
    ready, _ = ray.wait([ref], timeout=10)
    assert ready == [ref]
    with pytest.raises(ValueError, match="boom"):
        ray.get(fail.remote())


def test_bad_task_fields_and_options_are_refused_at_remote(running):
    running("drf_lb")
    fn = ra.policy("drf_lb")(where)
    with pytest.raises(TypeError, match="field 'resource_vec' \\(vec<float>\\) is missing"):
        fn.options(task={"tenant": "a"}).remote(1)
    with pytest.raises(TypeError, match="field 'tenant' must be string, got 3"):
        fn.options(task={"tenant": 3, "resource_vec": VEC}).remote(1)
    with pytest.raises(TypeError, match="unknown field 'colour'"):
        fn.options(task={"tenant": "a", "resource_vec": VEC, "colour": "red"}).remote(1)
    with pytest.raises(ValueError, match="'scheduling_strategy' conflicts with policy 'drf_lb'"):
        fn.options(scheduling_strategy="SPREAD")
    with pytest.raises(ValueError):
        fn.options(num_cpus=-1)  # Ray's own validation, at .options()
    with pytest.raises(RuntimeError, match="policy 'fifo' is not running"):
        ra.policy("fifo")(where).remote(1)
    with pytest.raises(TypeError, match="must decorate a @ray.remote function"):
        ra.policy("drf_lb")(lambda: 1)
    with pytest.raises(ValueError, match="already running"):
        start("drf_lb")
    with pytest.raises(ValueError, match="unknown plan 'warp' for policy 'fifo'; expected one of: auto, centralized"):
        ra.start("fifo", plan="warp")
    with pytest.raises(FileNotFoundError, match="plan file 'nowhere/plan.json' does not exist"):
        ra.start("fifo", plan="nowhere/plan.json")


def test_policies_run_side_by_side_and_shutdown_removes_their_slots(ray_cluster):
    start("fifo")
    start("least_loaded")
    names = {name for per_node in resources.get_cluster_state().values() for name in per_node if name.startswith("ra-")}
    assert {n.rsplit("-", 1)[0] for n in names} == {"ra-fifo-slot", "ra-least_loaded-slot"}
    a = ra.policy("fifo")(where).remote(1)
    b = ra.policy("least_loaded")(where).remote(2)
    assert [x for x, _, _ in ray.get([a, b])] == [1, 2]
    ra.shutdown()
    assert resources.created_resources() == {}
    state = resources.get_cluster_state()
    assert not [name for per_node in state.values() for name in per_node if name.startswith("ra-")]


def test_a_lost_node_loses_no_task(ray_cluster):
    extra = ray_cluster.cluster.add_node(num_cpus=2)  # a 5th node, lost below
    ray_cluster.cluster.wait_for_nodes()
    try:
        start("round_robin", queue=0)  # 2 tasks at a time per node
        fn = ra.policy("round_robin")(where)
        refs = [fn.remote(i, 2.0) for i in range(10)]  # two on every node, the extra one too
        wait_for(lambda: resources.get_cluster_state([extra.node_id])[extra.node_id]["CPU"]["available"] == 0,
                 timeout=20, message="two tasks running on the node to lose")
        ray_cluster.cluster.remove_node(extra)
        out = ray.get(refs, timeout=90)
    finally:
        ra.shutdown()
    assert sorted(x for x, _, _ in out) == list(range(10))  # every task's result, exactly once
    assert extra.node_id not in {node for _, node, _ in out}  # the lost node's tasks ran elsewhere
    assert resources.created_resources() == {}


def test_the_monitor_measures_the_run_and_feeds_the_compiler(running, tmp_path):
    from ray_adaptive.compiler import compile_policy
    from ray_adaptive.dsl import load_policy
    from ray_adaptive.workload.trace import read_trace

    rt = running("drf_lb", executors=1, queue=1)
    fn = ra.policy("drf_lb")(where)
    futures = [fn.options(task={"tenant": t, "resource_vec": VEC}).submit(i, 0.02)
               for i, t in enumerate(["greedy", "greedy", "greedy", "a", "b"] * 12)]
    ray.get([f.result(timeout=60) for f in futures])
    wait_for(lambda: rt.monitor.snapshot()["finished"] >= 60, timeout=10, message="the monitor to see 60 finishes")
    snap = rt.monitor.snapshot(rt.router)
    assert snap["group_by"] == "tenant" and snap["finished"] == 60
    groups = snap["groups"]
    assert {g: groups[g]["arrivals"] for g in groups} == {"a": 12, "b": 12, "greedy": 36}
    assert groups["greedy"]["rate_per_s"] > 2 * groups["a"]["rate_per_s"]
    assert all(g["duration_mean_s"] >= 0.02 for g in groups.values())  # dispatch to finish covers the run
    assert snap["pending"] == 0 and sum(snap["outstanding"].values()) == 0
    rt.monitor.export(rt.router)  # sets the ray_adaptive_* Ray metrics

    path = tmp_path / "run.csv"
    assert rt.monitor.write_trace(path) == 60
    trace = read_trace(path)
    assert sorted(t.fields["tenant"] for t in trace).count("greedy") == 36
    result = compile_policy(load_policy("drf_lb"), trace=trace, measure=False, window=60)
    # it replayed this run: its 60 tasks, at the rate they arrived
    assert sorted((t.id, t.fields["tenant"]) for t in result.window.tasks) == sorted((t.id, t.fields["tenant"]) for t in trace)
    arrivals = sorted(t.arrival for t in trace)
    assert result.rate == pytest.approx(59 / (arrivals[-1] - arrivals[0]))

    # latencies between the runtime's processes: a ping to the store once a second, and this
    # (decentralized) process's store syncs
    wait_for(lambda: rt.router.message_latencies() and rt.router.store_latencies(), timeout=10, period=0.05,
             message="a ping to the store and a store sync timed")
    snap = rt.monitor.snapshot(rt.router)
    assert snap["message_samples"] >= 1 and 0 < snap["message_p50_s"] <= snap["message_p99_s"] < 1.0
    assert snap["store_sync_samples"] >= 1 and 0 < snap["store_sync_p50_s"] < 1.0
    rt.monitor.export(rt.router)  # ray_adaptive_message_p50_s, ray_adaptive_store_sync_p50_s too


def test_a_restarted_policy_binds_to_its_new_slots(ray_cluster):
    fn = ra.policy("least_loaded")(where)
    for round_ in range(3):  # the same PolicyFunction across runtimes
        start("least_loaded", queue=0)
        try:
            out = ray.get([fn.remote(i, 0.2) for i in range(8)], timeout=60)
        finally:
            ra.shutdown()
        assert sorted(collections.Counter(n for _, n, _ in out).values()) == [2, 2, 2, 2], round_


def test_a_refused_submission_reaches_the_caller_and_frees_its_slot(running):
    rt = running("fifo", queue=0)

    @ra.policy("fifo")
    @ray.remote(num_cpus=1)
    def echo(x):
        return x

    with pytest.raises(TypeError):
        echo.remote(1, 2, 3)  # Ray refuses: echo takes one argument
    assert ray.get(echo.remote(7)) == 7
    wait_for(lambda: not sum(rt.router.outstanding().values()), timeout=10, message="the finish harvested")
    assert sum(rt.router.outstanding().values()) == 0 and rt.stats()["finished"] == 1


def test_results_stay_on_the_node_that_made_them(running, ray_cluster):
    """Completions are seen without fetching: the submitting process pulls a result only
    when someone fetches it, as with plain Ray."""
    rt = running("round_robin", queue=2)

    @ra.policy("round_robin")
    @ray.remote(num_cpus=1)
    def big(i):
        return bytes(2 << 20)  # 2 MiB: stored in the node's object store, not inlined

    refs = [big.remote(i) for i in range(8)]  # round robin: 2 per node
    wait_for(lambda: rt.stats()["finished"] >= 8, timeout=30, message="8 finishes seen")
    assert rt.stats()["finished"] == 8
    where_ = ray.experimental.get_object_locations(refs)
    holders = [tuple(where_[r]["node_ids"]) for r in refs]
    assert all(len(h) == 1 for h in holders), holders
    assert collections.Counter(h[0] for h in holders) == {n: 2 for n in ray_cluster.node_ids}
    assert all(len(x) == 2 << 20 for x in ray.get(refs))


def test_callers_in_several_threads_each_get_their_own_results_once(running):
    """With no room left, every waiting caller harvests completions itself; a finish is
    applied once whichever thread sees it first."""
    import threading

    rt = running("least_loaded", queue=0, hold="caller")  # 8 slots for 4 x 150 tasks: callers wait for room
    fn = ra.policy("least_loaded")(where)
    out: dict = {}

    def caller(k):
        out[k] = ray.get([fn.remote((k, i)) for i in range(150)])

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    for k in range(4):
        assert [x for x, _, _ in out[k]] == [(k, i) for i in range(150)]
    wait_for(lambda: rt.stats()["finished"] >= 600, timeout=10, message=lambda: f"600 finishes harvested: {rt.stats()}")
    s = rt.stats()
    assert (s["submitted"], s["dispatched"], s["finished"], s["pending"]) == (600, 600, 600, 0)
    assert rt.router.outstanding() == {}


def test_deadlines_of_placed_tasks_do_not_pile_up(running):
    """A deadline is kept until it passes or its task is placed and gone: a long deadline_s on
    many short tasks must not grow the router's heap without bound."""
    rt = running("round_robin", queue=30)
    fn = ra.policy("round_robin")(where).options(deadline_s=3600)
    assert len(ray.get([fn.remote(i) for i in range(3000)])) == 3000
    wait_for(lambda: len(rt.router.deadlines) <= 1024, timeout=20, period=0.05,
             message=lambda: f"the deadlines heap pruned to <= 1024 entries, has {len(rt.router.deadlines)}")
    assert rt.stats()["dropped"] == 0


def test_a_caller_waiting_for_room_held_elsewhere_does_not_spin_the_dispatcher(running):
    """Nothing of this process runs and its task waits (here: every node looks gone): the dispatcher
    thread looks for room every few ms, not in a busy loop (it once spun a core here)."""
    import os
    import threading

    rt = running("least_loaded", queue=0)
    for node in rt.router.decider.node_ids():
        rt.router.decider.mark_dead(node)  # no room anywhere, as if other processes held it all
    dispatcher = next(t for t in threading.enumerate() if t.name == "ra-router-least_loaded")

    def cpu_s() -> float:
        with open(f"/proc/self/task/{dispatcher.native_id}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    fn = ra.policy("least_loaded")(where).options(deadline_s=1.5)
    before, start = cpu_s(), time.monotonic()
    with pytest.raises(ra.PlacementDeadlineExceeded):
        fn.remote("no room")
    waited = time.monotonic() - start
    assert waited >= 1.4 and cpu_s() - before < 0.3 * waited


def test_a_failed_dispatcher_fails_the_waiting_tasks_instead_of_losing_them(running):
    """A bug that ends the dispatcher thread must not leave callers waiting forever: every task not
    launched fails with the cause, and later submissions are refused; launched tasks still run."""
    rt = running("least_loaded", queue=0, hold="caller")  # (the 4 tasks after the first 8 wait here)
    fn = ra.policy("least_loaded")(where)
    running_refs = [fn.remote(i, 1.0) for i in range(8)]  # every slot busy for 1 s
    waiting = [fn.submit(i) for i in range(8, 12)]
    decider = rt.router.decider

    def broken_tick():
        raise ZeroDivisionError("a bug in the decider")

    decider.tick = broken_tick  # the dispatcher thread calls it on its next round
    for f in waiting:
        with pytest.raises(RuntimeError, match="dispatcher of policy 'least_loaded' failed.*a bug in the decider"):
            f.result(timeout=10)
    with pytest.raises(RuntimeError, match="failed .*restart the policy"):
        fn.remote("later")
    assert sorted(x for x, _, _ in ray.get(running_refs, timeout=30)) == list(range(8))
    del decider.tick
