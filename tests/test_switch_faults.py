"""Switches that meet faults: a node that leaves while a switch builds the next plan's actors."""

from __future__ import annotations

import os
import threading

import ray

import ray_adaptive as ra
from ray_adaptive import resources
from ray_adaptive.runtime.topology import NAMESPACE, actor_name
from tests.conftest import wait_for

VEC = [1.0, 0.5, 0.0]


@ray.remote(num_cpus=1, max_retries=3)
def marked(folder: str, i: int) -> int:
    """Leave a marker per run, named by the node it ran on: a body run twice on one node fails on its
    second. (A task running on the node that leaves is run again elsewhere by Ray's retry: at least once
    for the body there, once for the result.)"""
    import time

    node = ray.get_runtime_context().get_node_id()
    os.close(os.open(os.path.join(folder, f"t{i}-{node}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    time.sleep(0.05)
    return i


def test_a_switch_while_a_node_leaves_completes_or_rolls_back_and_the_next_one_works(ray_cluster, tmp_path):
    extra = ray_cluster.cluster.add_node(num_cpus=2)  # a 5th node, removed as the switch starts
    ray_cluster.cluster.wait_for_nodes()
    rt = ra.start("drf_lb", plan="centralized", executors=1, queue=2)
    fn = ra.policy("drf_lb")(marked).options(task={"tenant": "a", "resource_vec": VEC})
    stop, refs = threading.Event(), []

    def submit():
        i = 0
        while not stop.is_set():
            refs.append(fn.remote(str(tmp_path), i))
            i += 1

    submitter = threading.Thread(target=submit, daemon=True)
    submitter.start()
    try:
        wait_for(lambda: len(refs) >= 20, timeout=30, message="tasks under way")
        ray_cluster.cluster.remove_node(extra)
        first = rt.switch("hybrid")  # placement actors for five nodes, one of which is leaving: no raise
        assert first["to"].startswith("hybrid")
        if "rolled_back" in first:  # nothing changed: the plan in force stays, and a second try works
            assert rt.plan.name.startswith("centralized")
            second = rt.switch("hybrid")
            assert "rolled_back" not in second, second
        assert rt.plan.name.startswith("hybrid")
        placements = [actor_name("drf_lb", f"placement-{i}", rt.topology.generation) for i in range(8)]
        hosts = set(ray.get([ray.get_actor(n, namespace=NAMESPACE).where.remote() for n in placements
                             if _exists(n)]))
        assert hosts and extra.node_id not in hosts
        wait_for(lambda: len(refs) >= 80, timeout=60, message="tasks under the hybrid")
    finally:
        stop.set()
        submitter.join(30)
        out = ray.get(refs, timeout=120)
        ra.shutdown()
    assert sorted(out) == list(range(len(refs)))  # each task's result once
    runs: dict = {}
    for name in os.listdir(tmp_path):
        task, node = name.split("-", 1)
        runs.setdefault(task, []).append(node)
    assert len(runs) == len(refs)
    again = {t: nodes for t, nodes in runs.items() if len(nodes) > 1}
    assert all(len(nodes) == 2 and extra.node_id in nodes for nodes in again.values()), again  # (only Ray's retry)
    assert resources.created_resources() == {}


def _exists(name: str) -> bool:
    try:
        ray.get_actor(name, namespace=NAMESPACE)
        return True
    except ValueError:
        return False


def test_a_generation_abandoned_leaves_no_actor_and_no_name(ray_cluster):
    """What a switch whose actors did not start does before it rolls back: the next switch to the same
    plan makes the same names (they carry the generation) and must find them free."""
    from ray_adaptive.compiler import lower, select_plan
    from ray_adaptive.runtime.topology import build_generation

    rt = ra.start("drf_lb", plan="centralized", executors=1, queue=2)
    try:
        old = rt.topology
        n = old.nodes
        hybrid, _ = select_plan(rt.policy, "hybrid", nodes=len(n), executors=1, queue=2)
        gen = build_generation(lower(hybrid, rt._analysis), old.generation + 1, old.nodes, old.slots, old.t0,
                               old.store, old.driver_node)
        gen.start_actors()
        names = [gen.config()["selector"], *gen.config()["placements"]]
        assert all(_exists(name) for name in names)
        gen.abandon()
        assert not any(_exists(name) for name in names)
        entry = rt.switch("hybrid")  # the same generation, the same names
        assert "rolled_back" not in entry and rt.plan.name == hybrid.name
    finally:
        ra.shutdown()
    assert resources.created_resources() == {}


def test_a_node_that_dies_while_a_switch_builds_its_generation_loses_nothing(ray_cluster, tmp_path):
    """The node leaves after the next generation's actors started on it (the ``built`` phase), before any
    process froze: the switch completes on what is left (or rolls back, saying so); every task runs once
    (but Ray's retry of one running on the node that left), the State audits exact once the load stops, and
    the next switch works."""
    extra = ray_cluster.cluster.add_node(num_cpus=2)
    ray_cluster.cluster.wait_for_nodes()
    rt = ra.start("drf_lb", plan="decentralized", executors=1, queue=2)
    fn = ra.policy("drf_lb")(marked).options(task={"tenant": "a", "resource_vec": VEC})
    stop, refs, removed = threading.Event(), [], []

    def submit():
        i = 0
        while not stop.is_set():
            refs.append(fn.remote(str(tmp_path), i))
            i += 1

    def on_phase(name, topo):
        if name == "built" and not removed:  # the hybrid's placement actors run, one of them on `extra`
            assert _exists(actor_name("drf_lb", "placement-0", topo.generation))
            removed.append(extra.node_id)
            ray_cluster.cluster.remove_node(extra)

    submitter = threading.Thread(target=submit, daemon=True)
    submitter.start()
    try:
        wait_for(lambda: len(refs) >= 20, timeout=30, message="tasks under way")
        entry = rt.switch("hybrid", _on_phase=on_phase)
        assert removed == [extra.node_id]
        assert rt.plan.name.startswith("decentralized" if "rolled_back" in entry else "hybrid"), (entry, rt.plan)
        seen = len(refs)
        wait_for(lambda: len(refs) >= seen + 40, timeout=60, message="tasks after the switch")
        second = rt.switch("centralized")
        assert "rolled_back" not in second and rt.plan.name.startswith("centralized"), second
        wait_for(lambda: len(refs) >= seen + 80, timeout=60, message="tasks after the second switch")
    finally:
        stop.set()
        submitter.join(30)
        out = ray.get(refs, timeout=120)
    try:
        report = wait_for(lambda: rt.audit(timeout_s=2), until=lambda r: r.exact, timeout=30,
                          message="the State back to its initial value, exactly")
        assert report.placed == report.undecided == 0
    finally:
        ra.shutdown()
    assert sorted(out) == list(range(len(refs)))
    runs: dict = {}
    for name in os.listdir(tmp_path):
        task, node = name.split("-", 1)
        runs.setdefault(task, []).append(node)
    assert len(runs) == len(refs)
    again = {t: nodes for t, nodes in runs.items() if len(nodes) > 1}
    assert all(len(nodes) == 2 and extra.node_id in nodes for nodes in again.values()), again
    assert resources.created_resources() == {}


def _raises_actor_died(actor) -> bool:
    try:
        ray.get(actor.__ray_ready__.remote(), timeout=10)
        return False
    except ray.exceptions.RayActorError:
        return True


def test_a_placement_actor_dead_when_a_restarted_hybrid_selector_empties_it_is_lost_not_fatal(ray_cluster):
    """A restarted hybrid selector empties its placement actors first. One killed between the selector's
    look-up and that reset is lost, as one that dies later is -- its error raised in the selector's
    constructor left the selector dead for good, never restarted (chaos.py: a wave waited 600 s)."""
    import threading as th

    from ray_adaptive.runtime.placement import Forwarder

    @ray.remote(num_cpus=0)
    class Reset:
        def reset(self) -> None:
            pass

    live, dead = Reset.remote(), Reset.remote()
    ray.get([live.__ray_ready__.remote(), dead.__ray_ready__.remote()])
    ray.kill(dead, no_restart=True)
    # ray.kill is asynchronous: a reset sent at once may still run on the actor
    wait_for(lambda: _raises_actor_died(dead), timeout=30, message="the killed actor dead")
    fwd = Forwarder([live, dead], th.Condition(), lambda: 0.0, lambda ids, now: None, lambda *a: True, lambda now: None)
    try:
        fwd.start(restarted=True)
        assert fwd.live == {0}
    finally:
        fwd.close()
        ray.kill(live, no_restart=True)
