"""The submission hot path on a real 4-node cluster: who holds a full cluster's tasks (``hold=``), and
harvests that look at windows of the tasks in flight -- each seen working, and seen failing without it."""

import collections
import time

import pytest
import ray

import ray_adaptive as ra
from ray_adaptive import resources
from tests.conftest import wait_for


@ray.remote(num_cpus=1)
def where(x, sleep=0.0):
    start = time.time()
    time.sleep(sleep)  # (the task's work: how long it holds its slot)
    return x, ray.get_runtime_context().get_node_id(), start


@pytest.fixture
def running(ray_cluster):
    yield lambda policy, **kw: ra.start(policy, plan=kw.pop("plan", "decentralized"), **kw)
    ra.shutdown()
    assert resources.created_resources() == {}


@pytest.mark.parametrize("plan", ["decentralized", "centralized"])
def test_ray_holds_what_full_nodes_cannot_and_every_task_runs_once(running, ray_cluster, plan):
    """least_loaded is proved to decide alike either way: with 8 slots, 40 tasks are all placed at
    once, spread evenly, and wait in Ray's queue behind their slots; each runs exactly once."""
    rt = running("least_loaded", plan=plan, queue=0)  # hold="auto"
    assert rt.stats()["held_by"] == "ray" and "strictly increases" in rt.holding
    fn = ra.policy("least_loaded")(where)
    # (long enough that none finishes while the 40 are submitted: a finish seen meanwhile would
    # rightly change where least_loaded puts the rest -- on a loaded machine, 0.1 s was not)
    refs = [fn.remote(i, 0.5) for i in range(40)]
    s = rt.stats()
    assert (s["dispatched"], s["pending"]) == (40, 0)  # none waits in the caller
    out = ray.get(refs, timeout=60)
    assert [x for x, _, _ in out] == list(range(40))
    assert sorted(collections.Counter(n for _, n, _ in out).values()) == [10, 10, 10, 10]


def test_the_caller_holds_them_when_asked(running):
    rt = running("least_loaded", queue=0, hold="caller")
    assert rt.stats()["held_by"] == "caller"
    fn = ra.policy("least_loaded")(where)
    futures = [fn.submit(i, 0.5) for i in range(12)]  # (decided by the dispatcher thread: see Decider.submit)
    deadline = time.monotonic() + 10
    while rt.stats()["dispatched"] < 8 and time.monotonic() < deadline:
        time.sleep(0.01)
    s = rt.stats()
    assert (s["dispatched"], s["pending"]) == (8, 4)  # the gate: executors + queue per node (tasks take 0.5 s)
    assert sorted(x for x, _, _ in ray.get([f.result(timeout=30) for f in futures])) == list(range(12))


def test_while_ray_holds_the_tasks_a_busy_caller_harvests_every_fresh_held_s(running):
    """No decision waits for room then, and the loads only rank the nodes: a submitting loop looks for
    finishes once their news is FRESH_HELD_S old, not every FRESH_S (at ~800 tasks/s: a look per
    ~16 tasks, not per ~4)."""
    from ray_adaptive.runtime.router import Router

    rt = running("least_loaded", queue=2)
    assert rt.stats()["held_by"] == "ray"
    fn = ra.policy("least_loaded")(where)
    ray.get([fn.remote(i) for i in range(20)])  # (warm)
    before, start = rt.router.stats.harvests, time.monotonic()
    refs = [fn.remote(i) for i in range(300)]
    elapsed, harvests = time.monotonic() - start, rt.router.stats.harvests - before
    assert [x for x, _, _ in ray.get(refs, timeout=60)] == list(range(300))
    assert harvests <= 1.5 * elapsed / Router.FRESH_HELD_S + 5, (harvests, elapsed)


def test_a_policy_outside_the_proof_keeps_the_gate_unless_asked(running):
    rt = running("round_robin", queue=0)
    assert rt.stats()["held_by"] == "caller" and "does not strictly increase" in rt.holding
    ra.shutdown()
    rt = running("round_robin", queue=0, hold="ray")
    fn = ra.policy("round_robin")(where)
    refs = [fn.remote(i, 0.1) for i in range(16)]
    assert rt.stats()["pending"] == 0
    out = ray.get(refs, timeout=60)
    assert sorted(collections.Counter(n for _, n, _ in out).values()) == [4, 4, 4, 4]  # its turns, kept


def test_a_task_with_a_deadline_still_waits_for_room(running):
    """Its deadline is a placement deadline: placed at once into Ray's queue, it could never miss it."""
    rt = running("least_loaded", queue=0)
    fn = ra.policy("least_loaded")(where)
    busy = [fn.remote(i, 1.5) for i in range(8)]  # every slot busy for 1.5 s
    with pytest.raises(ra.PlacementDeadlineExceeded):
        fn.options(deadline_s=0.3).remote("late")
    free = fn.remote("no deadline")  # placed at once, held by Ray
    assert rt.stats()["dropped"] == 1
    assert [x for x, _, _ in ray.get(busy + [free], timeout=60)] == [*range(8), "no deadline"]


def test_a_lost_node_loses_no_task_ray_held(ray_cluster):
    """Tasks waiting in Ray's queue behind a lost node's slot run elsewhere once the slot moves."""
    extra = ray_cluster.cluster.add_node(num_cpus=2)  # a 5th node, lost below
    ray_cluster.cluster.wait_for_nodes()
    try:
        rt = ra.start("least_loaded", plan="decentralized", queue=0)
        assert rt.stats()["held_by"] == "ray"
        fn = ra.policy("least_loaded")(where)
        refs = [fn.remote(i, 1.0) for i in range(30)]  # 6 per node: 2 running, 4 held by Ray
        assert rt.router.outstanding().get(extra.node_id) == 6
        # lost with two of its tasks running (its 2 CPUs in use), the other four behind them in Ray's queue
        wait_for(lambda: resources.get_cluster_state([extra.node_id])[extra.node_id]["CPU"]["available"] == 0,
                 timeout=30, period=0.05, message="two tasks running on the node to lose")
        ray_cluster.cluster.remove_node(extra)
        out = ray.get(refs, timeout=120)
    finally:
        ra.shutdown()
    assert sorted(x for x, _, _ in out) == list(range(30))  # every task's result, exactly once
    assert extra.node_id not in {node for _, node, _ in out}
    assert resources.created_resources() == {}


def test_harvests_look_at_windows_not_at_every_task_in_flight(running):
    rt = running("least_loaded", queue=0)
    fn = ra.policy("least_loaded")(where)
    refs = [fn.remote(i, 0.01) for i in range(400)]  # ~390 in flight at first
    ray.get(refs, timeout=120)
    s = rt.router.stats
    windowed = s.harvests - s.scans
    assert windowed > 0 and s.watched <= windowed * 4 * rt.router.harvester.window + s.scans * 400, s
    wait_for(lambda: rt.stats()["finished"] >= 400, timeout=20, period=0.01,
             message=lambda: f"the 400 finishes seen (stats: {rt.stats()})")
    assert rt.stats()["finished"] == 400 and rt.router.outstanding() == {}


def test_a_finish_outside_the_windows_is_seen_all_the_same(running):
    """Windows of one task per node see only the long tasks launched first; the short ones behind
    them finish first, and the scans find them: the caller waiting for room gets it long before
    the long tasks end (without scans it would wait for them)."""
    rt = running("least_loaded", queue=0, hold="caller")
    rt.router.harvester.window = 1
    fn = ra.policy("least_loaded")(where)
    long = [fn.remote(i, 4.0) for i in range(4)]  # one per node, first in each window
    short = [fn.remote(i, 0.05) for i in range(4, 8)]  # behind them, on the same nodes
    started = time.time()
    x, _, at = ray.get(fn.remote("waited"), timeout=60)  # no room until a short one finishes
    assert x == "waited" and at - started < 2.5, at - started
    assert len(ray.get(long + short, timeout=60)) == 8
