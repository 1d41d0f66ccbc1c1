"""Actors placed by policies (issue 38), on the session's 4-node cluster.

Under each plan: 8 actors under least-loaded land two per node; ``ray.kill``
of one runs its OnFinish once (its node's count in State drops by one) and
the next actor goes to that node. A node lost with actors on it: OnFinish
once each, and the one with ``max_restarts=1`` is placed again by the policy.
Actor creations survive a selector kill, each constructor run once. Actors
and tasks share DRF-LB's State: two tenants' dominant shares stay within one
task of each other under backlog.

The policy is least-loaded with counters in State (``held`` per node,
``dispatches``, ``finishes``), so that every hook's run is seen exactly.
"""

from __future__ import annotations

import collections
import os
import time
import uuid

import pytest
import ray

import ray_adaptive as ra
from ray_adaptive import resources
from ray_adaptive.dsl import parse_policy
from ray_adaptive.runtime.actor_life import actor_stats
from tests.conftest import state_in_force, wait_for

COUNTED = """
// least-loaded, counting each hook's runs in State
State:
  held: map<string, int>
  dispatches: int
  finishes: int

Score(task, node):
  return get_load(node)

OnDispatch(task, node):
  held[node.id] += 1
  dispatches += 1

OnFinish(task, node):
  held[node.id] -= 1
  finishes += 1
"""
NAME = "counted_ll"


@ray.remote(num_cpus=0)
class Replica:
    """Where it runs; ``marks``: a directory where each constructor run leaves a file of its own, and the
    actor's index one made with O_EXCL (a second run for that index fails to create it)."""

    def __init__(self, index=None, marks=None):
        if marks is not None:
            with open(os.path.join(marks, f"run-{index}-{uuid.uuid4().hex}"), "w"):
                pass
            os.close(os.open(os.path.join(marks, f"actor-{index}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))

    def node(self):
        return ray.get_runtime_context().get_node_id()

    def exit(self):
        ray.actor.exit_actor()

    def crash(self):
        os._exit(1)

    def pid(self):
        return os.getpid()


def _held(rt) -> dict:
    return {n: k for n, k in state_in_force(rt)["held"].items() if k}


def _start(plan, **kw):
    return ra.start(parse_policy(COUNTED, name=NAME), plan=plan, executors=2, queue=2, **kw)


def _shut_down(handles):
    """Whatever the test's outcome: its actors killed (a binding resource goes with its actor), the policy stopped."""
    for h in handles:
        ray.kill(h)
    ra.shutdown()


def _ended_everywhere(rt, handles):
    for h in handles:
        ray.kill(h)
    wait_for(lambda: not rt.router.outstanding(), timeout=30,
             message=lambda: f"every actor's end harvested: {rt.router.outstanding()}")


@pytest.mark.parametrize("plan", ["centralized", "decentralized", "hybrid"])
def test_actors_spread_and_a_killed_one_frees_its_place(ray_cluster, plan):
    nodes = ray_cluster.node_ids
    # (the counting policy has no hybrid plan: its hooks read the node, which the hybrid's selector does not
    # know when it runs them; there, plain least-loaded, and the router's counts)
    name = NAME if plan != "hybrid" else "least_loaded"
    rt = _start(plan) if plan != "hybrid" else ra.start("least_loaded", plan=plan, executors=2, queue=2)
    handles: list = []
    try:
        cls = ra.policy(name)(Replica)
        handles += [cls.options(task={}).remote() for _ in range(8)]
        assert all(isinstance(h, ray.actor.ActorHandle) for h in handles)
        where = ray.get([h.node.remote() for h in handles], timeout=60)
        assert collections.Counter(where) == {n: 2 for n in nodes}, where
        assert rt.router.outstanding() == {n: 2 for n in nodes}
        placed = rt.why_placed(handles[0])
        assert placed["state"] == "placed", placed
        if plan != "hybrid":  # (the hybrid's selector runs the hooks before a placement picks the node)
            wait_for(lambda: _held(rt), until=lambda h: h == {n: 2 for n in nodes}, timeout=10)

        ray.kill(handles[0])
        wait_for(lambda: rt.router.outstanding().get(where[0]), until=lambda k: k == 1, timeout=20,
                 message="the killed actor's end harvested")
        if plan != "hybrid":
            wait_for(lambda: state_in_force(rt), until=lambda s: s["finishes"] == 1 and s["held"][where[0]] == 1,
                     timeout=10)
        time.sleep(0.5)  # (no second OnFinish comes later)
        assert rt.stats()["finished"] == 1
        if plan != "hybrid":
            assert state_in_force(rt)["finishes"] == 1

        handles.append(cls.options(task={}).remote())
        assert ray.get(handles[-1].node.remote(), timeout=60) == where[0]  # the place the killed one left
        _ended_everywhere(rt, handles[1:])
        if plan != "hybrid":
            wait_for(lambda: state_in_force(rt), until=lambda s: s["finishes"] == 9 and s["dispatches"] == 9
                     and not any(s["held"].values()), timeout=10)
        assert rt.stats()["finished"] == 9
    finally:
        _shut_down(handles)
    assert actor_stats(name).ended.get("dead", 0) >= 9
    wait_for(lambda: not resources.created_resources(), timeout=10,
             message=lambda: f"no binding resource left: {resources.created_resources()}")


def test_an_actor_that_exits_its_handle_dropped_or_its_constructor_failing_ends_once(ray_cluster, tmp_path):
    rt = _start("decentralized")
    handles: list = []
    try:
        cls = ra.policy(NAME)(Replica)
        handles += [cls.options(task={}).remote() for _ in range(2)]
        ray.get([h.node.remote() for h in handles], timeout=60)
        handles[0].exit.remote()  # its own exit
        wait_for(lambda: state_in_force(rt), until=lambda s: s["finishes"] == 1, timeout=20, message="the exit's OnFinish")
        handles.clear()  # the last handle of the other gone: Ray ends it
        wait_for(lambda: state_in_force(rt), until=lambda s: s["finishes"] == 2, timeout=20, message="the drop's OnFinish")
        broken = cls.options(task={}).remote(0, str(tmp_path / "missing"))  # its constructor raises
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(broken.node.remote(), timeout=60)
        wait_for(lambda: state_in_force(rt), until=lambda s: s["finishes"] == 3 and not any(s["held"].values()),
                 timeout=20, message="the failed constructor's OnFinish")
        time.sleep(0.5)
        assert (state_in_force(rt)["finishes"], state_in_force(rt)["dispatches"], rt.stats()["finished"]) == (3, 3, 3)
    finally:
        _shut_down(handles)
    wait_for(lambda: not resources.created_resources(), timeout=10)


def test_an_actor_whose_process_dies_on_a_live_node_restarts_in_place_without_a_hook(ray_cluster):
    rt = _start("decentralized")
    handles: list = []
    try:
        cls = ra.policy(NAME)(Replica)
        handles.append(cls.options(task={}, max_restarts=1).remote())  # (no task retries: the crash runs once)
        home = ray.get(handles[0].node.remote(), timeout=60)
        pid = ray.get(handles[0].pid.remote(), timeout=10)
        handles[0].crash.remote()

        def where():
            try:
                return ray.get(handles[0].node.remote(), timeout=10)
            except ray.exceptions.RayActorError:  # (restarting: unavailable meanwhile)
                return None
        assert wait_for(where, timeout=60, period=0.1) == home  # Ray restarted it there (its resource)
        assert ray.get(handles[0].pid.remote(), timeout=10) != pid  # (a new process: it was restarted)
        time.sleep(1.0)  # (a few of the watch's looks)
        s = state_in_force(rt)
        assert (s["dispatches"], s["finishes"], _held(rt)) == (1, 0, {home: 1}), s
        assert rt.router.outstanding() == {home: 1}
    finally:
        _shut_down(handles)
    wait_for(lambda: not resources.created_resources(), timeout=10)


def test_a_lost_node_ends_its_actors_once_and_restartable_ones_are_placed_again(ray_cluster):
    extra = ray_cluster.cluster.add_node(num_cpus=2)
    ray_cluster.cluster.wait_for_nodes()
    lost = extra.node_id
    handles: list = []
    before = actor_stats(NAME)  # (this process's counts since it began: the other tests' actors too)
    try:
        rt = _start("centralized")
        nodes = [n.id for n in rt.topology.nodes]
        assert lost in nodes
        cls = ra.policy(NAME)(Replica)
        once = [cls.options(task={}).remote() for _ in nodes]  # one per node (least-loaded, ties by order)
        twice = [cls.options(task={}, max_restarts=1, max_task_retries=-1).remote() for _ in nodes]
        handles += once + twice
        where = ray.get([h.node.remote() for h in once + twice], timeout=60)
        assert collections.Counter(where) == {n: 2 for n in nodes}
        gone, back = once[where.index(lost)], twice[where[len(once):].index(lost)]

        ray_cluster.cluster.remove_node(extra)
        extra = None
        # both ended once (OnFinish), the restartable one placed again (OnDispatch) on a live node. (The
        # node's leave is a live switch, which may rebuild State from the running actors: what State holds
        # per node is checked, and the router's and actor_life's counts of ends and placements.)
        new_home = ray.get(back.node.remote(), timeout=60)  # (max_task_retries: waits for the restart)
        assert new_home != lost
        wait_for(lambda: _held(rt), until=lambda h: h.get(new_home) == 3 and not h.get(lost)
                 and sum(h.values()) == 2 * len(nodes) - 1, timeout=30,
                 message=lambda: f"the lost node's actors ended and one placed again; router {rt.stats()}, "
                                 f"actors {actor_stats(NAME)}, switches {rt.history}")
        assert new_home == min((n for n in nodes if n != lost), key=nodes.index)  # least-loaded, then node order
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(gone.node.remote(), timeout=60)
        time.sleep(1.0)  # (nothing more comes: no second OnFinish, no second placement)
        stats = actor_stats(NAME)
        ended = {k: v - before.ended.get(k, 0) for k, v in stats.ended.items()}
        assert {k: v for k, v in ended.items() if v} == {"dead": 1, "moved": 1}, stats
        assert stats.placed - before.placed == 2 * len(nodes) + 1, stats
        assert (rt.stats()["finished"], rt.stats()["dispatched"]) == (2, 2 * len(nodes) + 1)
        assert _held(rt) == {**{n: 2 for n in nodes if n != lost}, new_home: 3}
        _ended_everywhere(rt, [h for h in once + twice if h is not gone])
        wait_for(lambda: state_in_force(rt), until=lambda s: not any(s["held"].values()), timeout=10)
    finally:
        _shut_down(handles)
        if extra is not None:
            ray_cluster.cluster.remove_node(extra)
    wait_for(lambda: not resources.created_resources(), timeout=10,
             message=lambda: f"no binding resource left: {resources.created_resources()}")


def test_actor_creation_survives_a_selector_kill_each_created_once(ray_cluster, tmp_path):
    # 4 places, and tasks beyond them wait in the policy (least-loaded alone would let Ray's queue hold them)
    rt = ra.start(parse_policy(COUNTED, name=NAME), plan="centralized", executors=1, queue=0, hold="caller")
    marks = str(tmp_path)
    handles: list = []
    try:
        cls = ra.policy(NAME)(Replica)
        futures = [cls.options(task={}).submit(i, marks) for i in range(8)]  # 4 placed, 4 wait
        first = [f.result(timeout=60) for f in futures[:4]]
        handles += first
        ray.get([h.node.remote() for h in first], timeout=60)
        assert not any(f.done() for f in futures[4:])
        assert rt.why_pending(futures[4])["state"] == "pending"
        ray.kill(rt.topology.selector, no_restart=False)
        for h in first:  # their places free up: the 4 waiting are placed by the restarted selector
            ray.kill(h)
        rest = [f.result(timeout=60) for f in futures[4:]]
        handles += rest
        assert len(set(ray.get([h.node.remote() for h in rest], timeout=60))) == 4
        _ended_everywhere(rt, rest)
    finally:
        _shut_down(handles + [f.result() for f in futures if f.done() and not f.exception()])
    runs = sorted(os.listdir(marks))
    assert sorted(r for r in runs if r.startswith("actor-")) == [f"actor-{i}" for i in range(8)]
    assert len([r for r in runs if r.startswith("run-")]) == 8, runs  # each constructor ran once
    wait_for(lambda: not resources.created_resources(), timeout=10)


@ray.remote(num_cpus=0)
class Creator:
    """A submitting process that is not a driver: it attaches to the running policy, creates actors through
    it (it owns them: they die with it, Ray's fate-sharing) and may crash."""

    def create(self, k):
        cls = ra.policy(NAME)(Replica)
        self.made = [cls.options(task={}).remote() for _ in range(k)]
        return ray.get([h.node.remote() for h in self.made])

    def crash(self):
        os._exit(1)


@pytest.mark.parametrize("plan", ["centralized", "decentralized"])
def test_a_crashed_submitting_process_takes_its_actors_share_out_of_the_state_once(ray_cluster, plan):
    """A Ray actor that created policy actors crashes: its actors die with it, and the owner's job watch
    evicts the dead process (its worker marked dead): the State is rebuilt without their share -- their
    OnFinish, once -- and the audit finds it exact; the bindings it left are removed; the driver's own actor
    keeps its place."""
    rt = _start(plan)

    def held():  # the State in force: the selector's, or the replicas' merged at the store
        s = state_in_force(rt) if plan == "centralized" else ray.get(rt.topology.store.state.remote(), timeout=10)
        return {n: k for n, k in s["held"].items() if k}

    handles: list = []
    creator = Creator.remote()
    try:
        made = ray.get(creator.create.remote(3), timeout=60)
        handles.append(ra.policy(NAME)(Replica).options(task={}).remote())
        mine = ray.get(handles[0].node.remote(), timeout=60)
        if plan == "centralized":  # (a decentralized replica pushes its changes when tasks wait or finish)
            assert len(set(made + [mine])) == 4  # least-loaded: one per node
            wait_for(held, until=lambda h: sum(h.values()) == 4, timeout=10)
        creator.crash.remote()
        wait_for(lambda: [h for h in rt.history if "died, the job lives on" in h.get("reason", "")], timeout=30,
                 message=lambda: f"the crashed process evicted: {rt.history[-2:]}")
        wait_for(held, until=lambda h: h == {mine: 1}, timeout=10,
                 message=lambda: f"the crashed process's actors out of the State: {held()}")
        time.sleep(1.0)  # (nothing more comes: no second OnFinish)
        assert held() == {mine: 1}
        report = rt.audit()
        assert report.exact, report
        # the bindings it left are removed by the eviction (its own thread went with it)
        wait_for(lambda: [r for rs in resources.created_resources().values() for r in rs if "-actor-" in r],
                 until=lambda left: len(left) == 1, timeout=10, message="the crashed process's bindings removed")
        ray.kill(handles[0])
        wait_for(held, until=lambda h: not h, timeout=20, message="the driver's actor's OnFinish")
        # (no audit now: the policy's finishes counter is not implied by the tasks in flight once one ended)
    finally:
        ray.kill(creator)
        _shut_down(handles)
    wait_for(lambda: not resources.created_resources(), timeout=10,
             message=lambda: f"no binding resource left: {resources.created_resources()}")


@ray.remote(num_cpus=1)
def _job(seconds):
    time.sleep(seconds)


def test_actors_and_tasks_share_drf_state(ray_cluster):
    """Tenant "a" creates actors (each holds its place for good), tenant "b" runs tasks; both backlogged.
    DRF-LB serves the tenant of the smaller dominant share first, so "a" gets places only while its share
    is not above "b"'s: the shares stay within one task of each other."""
    vec = [0.1, 0.2, 0.1]
    rt = ra.start("drf_lb", plan="centralized", executors=1, queue=1)  # 8 places
    actors: list = []
    try:
        cls = ra.policy("drf_lb")(Replica).options(task={"tenant": "a", "resource_vec": vec})
        fn = ra.policy("drf_lb")(_job).options(task={"tenant": "b", "resource_vec": vec})
        actors += [cls.submit() for _ in range(8)]
        tasks = [fn.submit(0.3) for _ in range(60)]
        wait_for(lambda: sum(f.done() for f in actors), until=lambda k: k >= 4, timeout=60,
                 message="actors of tenant a placed")
        shares = []
        for _ in range(10):  # under backlog: both tenants wait
            alloc = state_in_force(rt)["alloc"]
            shares.append([max(x / c for x, c in zip(alloc.get(t, [0, 0, 0]), [1.5, 2.0, 1.0])) for t in "ab"])
            time.sleep(0.2)
        one_task = max(x / c for x, c in zip(vec, [1.5, 2.0, 1.0]))
        assert all(abs(a - b) <= one_task + 1e-9 for a, b in shares), shares
        assert sum(f.done() for f in actors) == 4  # half of the 8 places: a's share equals b's
        for f in tasks:
            f.result(timeout=120)
        _ended_everywhere(rt, [f.result(timeout=60) for f in actors])  # (b's tasks done: a's other 4 placed)
    finally:
        _shut_down([f.result() for f in actors if f.done() and not f.exception()])
    wait_for(lambda: not resources.created_resources(), timeout=10)


def test_actors_live_through_a_live_switch_and_end_under_the_next_plan(ray_cluster):
    """Placed under one plan, ended under the next: the switch hands their places over, OnFinish runs once."""
    rt = _start("centralized")
    handles: list = []
    try:
        cls = ra.policy(NAME)(Replica)
        handles += [cls.options(task={}).remote() for _ in range(4)]
        ray.get([h.node.remote() for h in handles], timeout=60)
        entry = rt.switch("decentralized")
        assert "rolled_back" not in entry and rt.plan.name.startswith("decentralized"), entry
        assert sum(_held(rt).values()) == 4 and rt.router.outstanding() == {n: 1 for n in ray_cluster.node_ids}
        handles.append(cls.options(task={}).remote())  # placed by the new plan, beside them
        assert sum(_held(rt).values()) == 5
        # ray-adaptive status shows them (from this process's load report, sent every second)
        from ray_adaptive.status import describe, format_status

        d = wait_for(lambda: describe(NAME), until=lambda d: (d.get("policy_actors") or {}).get("alive") == 5,
                     timeout=10)
        assert d["policy_actors"]["arrivals"] >= 5
        assert "actors placed by the policy: 5 alive" in format_status(d)
        # the monitor records them while they live: the controller's recorded workload and the trace have them
        assert len(rt.monitor.running()) == 5 and rt.stats()["finished"] == 0
        assert len(rt.recorded_tasks(rt.clock())) == 5  # (from now on: each holds its room)
        _ended_everywhere(rt, handles)
        wait_for(lambda: _held(rt), until=lambda h: not h, timeout=10)
        assert rt.stats()["finished"] == 5
        wait_for(lambda: rt.monitor.running(), until=lambda r: not r, timeout=10)
        assert len(rt.monitor.records()) == 5
    finally:
        _shut_down(handles)


def _example(name):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_actor_examples_run_and_say_where_each_actor_went(ray_cluster, capsys):
    """examples/replicas_across_zones.py and examples/session_affinity.py, on the session's cluster (zones
    a, a, b, b: its nodes' labels)."""
    zones = {n: ("a" if i < len(ray_cluster.node_ids) // 2 else "b") for i, n in enumerate(ray_cluster.node_ids)}
    steps = _example("replicas_across_zones").run(zones)
    # the zone with fewer replicas first: spread evenly at every step (scaled down: the newest removed first)
    assert [sum(z.values()) for z in steps.values()] == [4, 6, 3, 5], steps
    assert all(abs(z.get("a", 0) - z.get("b", 0)) <= 1 for z in steps.values()), steps
    out = capsys.readouterr().out
    assert out.count("placed on node") == 4 + 2 + 2 and "served" in out

    homes = _example("session_affinity").run()
    assert all(first == again for first, again in homes.values()), homes  # back where its cache is
    assert len({first for first, _ in homes.values()}) == 3  # new keys: least-loaded, one per node
    out = capsys.readouterr().out
    assert out.count("the same node: its cache is there") == 3
    wait_for(lambda: not resources.created_resources(), timeout=10)
