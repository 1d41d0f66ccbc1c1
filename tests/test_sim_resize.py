"""Heterogeneous and changing clusters in the compiler and the simulator (issue 34).

* the compiler takes the nodes one by one (``cluster=``): a uniform list is the old uniform cluster, a
  node with 0 executors is left out, the execution bound sums every node's executors;
* the simulator takes nodes joining and leaving during a run: a node that joined is used, one that left
  (drained) gets no task after it left and finishes what it had, nothing is lost or run twice, and the
  plan in force is hosted again on the new nodes (one decentralized scheduler per member).
"""

from __future__ import annotations

import pytest

from ray_adaptive.compiler import Profile, analyze, compile_policy, enumerate_plans, estimate_table, lower, select_plan
from ray_adaptive.dsl import load_policy
from ray_adaptive.plan import Role
from ray_adaptive.sim.membership import NodeEvent, resize_steps
from ray_adaptive.sim.plan_sim import PlanSim
from ray_adaptive.workload.generate import paper_workload
from ray_adaptive.workload.specs import NodeSpec


@pytest.fixture(scope="module")
def drf():
    return load_policy("drf_lb")


# ------------------------------------------------------------------ compiler

def test_a_uniform_cluster_given_node_by_node_compiles_as_the_uniform_one(drf):
    a = compile_policy(drf, rate=300, nodes=6, executors=2, window=120, measure=False, workers=1)
    b = compile_policy(drf, rate=300, cluster=[2] * 6, window=120, measure=False, workers=1)
    assert a.capacity == b.capacity
    assert [(e.plan.name, e.throughput, e.competitive_ratio) for e in a.estimates] == \
           [(e.plan.name, e.throughput, e.competitive_ratio) for e in b.estimates]
    assert a.choice.estimate.plan.name == b.choice.estimate.plan.name


def test_each_node_counts_its_own_executors_and_a_node_without_any_is_left_out(drf):
    c = compile_policy(drf, rate=200, cluster=[0, 4, 1, NodeSpec("x", executors=3, queue=1)], window=120,
                       measure=False, workers=1)
    assert c.nodes == 3  # (the 0-executor head is not a node the estimates see)
    assert [n.executors for n in c.window.nodes] == [4, 1, 3] and [n.queue for n in c.window.nodes] == [2, 2, 1]
    mean = sum(t.duration for t in c.window.tasks) / len(c.window.tasks)
    assert c.capacity == pytest.approx(8 / mean, rel=0.02)
    assert c.as_dict()["cluster"]["executors"] == [4, 1, 3]
    decentralized, _ = select_plan(drf, "decentralized", cluster=[0, 4, 1, 3])
    assert decentralized.k(c.nodes) == 3


def test_the_estimate_table_records_the_size_it_was_computed_for(drf):
    t = estimate_table(drf, cluster=[0, 2, 2, 4], fractions=(0.5, 1.5), window=100, measure=False)
    assert t.nodes == 3 and t.executors == 8
    assert t.fits(3, 8) and not t.fits(4, 8) and not t.fits(3, 6) and t.fits(None)
    uniform = estimate_table(drf, nodes=3, executors=2, fractions=(0.5,), window=100, measure=False)
    assert uniform.executors == 6 and uniform.capacity == pytest.approx(t.capacity * 6 / 8)


@pytest.mark.parametrize("cluster, error", [
    ([0, 0], "no node of the cluster runs tasks"),
    ([1, -1], "executors and queue must be >= 0"),
    ([1, "4"], "needs an int 'executors'"),
    ("4", "one entry per node"),
])
def test_a_bad_cluster_is_refused_with_what_is_wrong(drf, cluster, error):
    with pytest.raises((TypeError, ValueError), match=error):
        compile_policy(drf, rate=100, cluster=cluster, window=50, measure=False, workers=1)


# ----------------------------------------------------------------- simulator

def _plans(drf, nodes):
    analysis = analyze(drf)
    plans, _ = enumerate_plans(analysis, nodes)
    by_name = {p.name: p for p in plans}
    return analysis, by_name


@pytest.mark.parametrize("name", ["centralized", "decentralized+sync 100ms", "hybrid"])
def test_nodes_that_join_are_used_and_nodes_that_leave_drain(drf, name):
    analysis, plans = _plans(drf, 4)
    sc = paper_workload(150, seconds=3.0, nodes=4, seed=3)
    events = resize_steps([(1.0, +6), (2.0, -6)], sc.nodes)
    joined = {n.id for n in events[0].join}
    sim = PlanSim(lower(plans[name], analysis, Profile(), 4), sc, seed=1, events=events,
                  relower=lambda p, n: lower(plans[name], analysis, Profile(), n))
    sim.run()
    statuses = [t.status for t in sim.tasks]
    assert set(statuses) <= {"finished", "dropped"} and statuses.count("finished") >= 0.97 * len(statuses)
    before = {t.node.id for t in sim.tasks if t.dispatched_at is not None and t.dispatched_at < 1.0}
    during = {t.node.id for t in sim.tasks if t.dispatched_at is not None and 1.0 <= t.dispatched_at < 2.0}
    after = {t.node.id for t in sim.tasks if t.dispatched_at is not None and t.dispatched_at >= 2.0}
    assert not before & joined and not after & joined  # (never placed on a node outside the cluster)
    assert len(during & joined) >= 4  # (the nodes that joined took tasks)
    for t in sim.tasks:  # a drained node finished what it had: nothing there was dropped or cut short
        if t.node is not None and t.node.id in joined:
            assert t.status == "finished" and t.finished_at >= t.started_at
    assert [(r["nodes"], r["plan"]) for r in sim.resizes] == [(10, name), (4, name)]
    assert sim.size == (4, 4)


def test_a_decentralized_plan_has_a_scheduler_per_member_after_each_event(drf):
    analysis, plans = _plans(drf, 3)
    p = plans["decentralized+sync 100ms"]
    sc = paper_workload(60, seconds=2.0, nodes=3, seed=2)
    seen = []
    sim = PlanSim(lower(p, analysis, Profile(), 3), sc, seed=0, events=resize_steps([(0.5, +5), (1.5, -4)], sc.nodes),
                  relower=lambda lp, n: seen.append(n) or lower(p, analysis, Profile(), n))
    for until in (0.4, 1.0, 1.9):
        sim.advance(until)
        host = next(h for h in sim.hosts if h.role is Role.SCHEDULERS)
        assert len(host) == sim.size[0]
    assert seen == [8, 4]
    sim.run()
    assert sum(t.status == "finished" for t in sim.tasks) == len(sim.tasks)


def test_node_events_are_checked(drf):
    analysis, plans = _plans(drf, 2)
    sc = paper_workload(30, seconds=1.0, nodes=2)
    lp = lower(plans["centralized"], analysis, Profile(), 2)
    with pytest.raises(ValueError, match="'n9' leaves at 0.5 s but is not in the cluster"):
        PlanSim(lp, sc, events=[NodeEvent(0.5, leave=("n9",))])
    with pytest.raises(ValueError, match="'n0' joins at 0.5 s but is in the cluster already"):
        PlanSim(lp, sc, events=[NodeEvent(0.5, join=(NodeSpec("n0"),))])
    with pytest.raises(ValueError, match="with no node"):
        PlanSim(lp, sc, events=[NodeEvent(0.5, leave=("n0", "n1"))])
    with pytest.raises(ValueError, match="at least one must stay"):
        resize_steps([(0.5, -2)], sc.nodes)
    with pytest.raises(ValueError, match="in time order"):
        resize_steps([(0.5, +1), (0.2, -1)], sc.nodes)
