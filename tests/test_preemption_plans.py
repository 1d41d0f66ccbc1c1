"""Preemption in the compiler's plans and the plan simulator (issue 39): which architectures can choose a
victim, and the simulated plans against the ideal replay's hand-worked scenario (tests/test_preemption.py)."""

import pytest

from ray_adaptive.compiler.analysis import analyze
from ray_adaptive.compiler.enumeration import enumerate_plans
from ray_adaptive.compiler.lowering import lower
from ray_adaptive.compiler.profile import Profile
from ray_adaptive.dsl import load_policy
from ray_adaptive.plan import Architecture
from ray_adaptive.sim import simulate
from ray_adaptive.workload import scenario_from_dict

VEC = [0.375, 0.5, 0.25]


def pt(id, arrival, duration, preemptible=True, submitter="", **fields):
    return {"id": id, "arrival": arrival, "duration": duration, "preemptible": preemptible, "fields": fields,
            "submitter": submitter}


def reclaim_scenario(submitter=lambda tenant, i: tenant):
    tasks = ([pt(f"A{i}", 0.0, 10, submitter=submitter("A", i), tenant="A", resource_vec=VEC) for i in range(8)]
             + [pt(f"B{i}", 1.0, 10, submitter=submitter("B", i), tenant="B", resource_vec=VEC) for i in range(3)])
    return scenario_from_dict({"nodes": [{"id": f"n{i}", "queue": 0} for i in range(4)], "tasks": tasks})


def plan_named(policy, nodes=4):
    a = analyze(load_policy(policy))
    plans, excluded = enumerate_plans(a, nodes=nodes)
    return a, {p.name: p for p in plans}, {e.name: e for e in excluded}


@pytest.mark.parametrize("policy", ["priority_preemptive", "drf_reclaim"])
def test_only_centralized_plans_may_preempt(policy):
    _, plans, excluded = plan_named(policy, nodes=12)
    assert plans and {p.architecture for p in plans.values()} == {Architecture.CENTRALIZED}
    assert "hybrid" in excluded and "no role can choose a victim" in excluded["hybrid"].why
    dec = next(e for n, e in excluded.items() if n.startswith("decentralized") and "preempts" in e.why)
    assert "each of its 12 schedulers sees only the running tasks it placed (~1/12 of them)" in dec.why


def test_a_policy_that_does_not_preempt_keeps_every_architecture():
    _, plans, _ = plan_named("priority", nodes=12)
    assert {p.architecture for p in plans.values()} == set(Architecture)


def test_centralized_plan_reclaims_as_the_ideal_does_after_its_decision_latency():
    """The ideal (tests/test_preemption.py): B below its share from 1, timeout 5, first recheck at 6, grace 2:
    two of A's tasks stopped at 8, B0 and B1 on their executors. The centralized selector (the compiler's
    fixed cost model: 1.67 ms a decision) starts A0..A3 one decision apart, so the two that ran least --
    A3 on n3 and A2 on n2 -- are the victims (the ideal, starting all four at 0, took n0 and n1 by node
    order); the recheck at 6 is the selector's own, so the stops are at 8 too."""
    a, plans, _ = plan_named("drf_reclaim")
    r = simulate(lower(plans["centralized"], a, Profile(), nodes=4), reclaim_scenario())
    t = {x.id: x for x in r.tasks}
    assert [(x, t[x].stopped[0][0], t[x].stopped[0][2]) for x in ("A2", "A3")] == [("A2", "n2", 8.0), ("A3", "n3", 8.0)]
    assert not t["A0"].stopped and not t["A1"].stopped
    assert {(x, t[x].node.id, t[x].started_at) for x in ("B0", "B1")} == {("B0", "n3", 8.0), ("B1", "n2", 8.0)}
    m = r.metrics()
    assert m.preemptions == 2 and m.wasted_s == pytest.approx(16.0, abs=0.02)


def test_simulated_hybrid_and_decentralized_plans_cannot_reclaim_across_tenants():
    """What the compiler's exclusion says, measured: a hybrid never preempts; a decentralized scheduler
    (one per submitter: here per tenant) sees only its own tenant's running tasks, so B's finds no victim
    and B waits for A's tasks to end at 10."""
    a = analyze(load_policy("drf_reclaim"))
    for arch in (Architecture.HYBRID, Architecture.DECENTRALIZED):
        r = simulate(lower(_unfiltered(a, arch), a, Profile(), nodes=4), reclaim_scenario())
        assert r.metrics().preemptions == 0, arch
        assert min(x.started_at for x in r.tasks if x.id.startswith("B")) >= 10.0


def test_a_decentralized_scheduler_preempts_what_it_placed_itself():
    """priority_preemptive, one submitter for every task: its scheduler placed the low task, so it can take it
    back for the high one -- the approximation works when the victim is its own."""
    a = analyze(load_policy("priority_preemptive"))
    sc = scenario_from_dict({"nodes": [{"id": "n0", "queue": 0}], "tasks": [
        pt("lo", 0.0, 20, submitter="c", priority=0), pt("hi", 1.0, 1, False, submitter="c", priority=5)]})
    r = simulate(lower(_unfiltered(a, Architecture.DECENTRALIZED), a, Profile(), nodes=1), sc)
    t = {x.id: x for x in r.tasks}
    assert t["lo"].preemptions == 1 and t["hi"].started_at == pytest.approx(3.0, abs=0.01)  # 1 + grace 2


def _unfiltered(analysis, arch):
    """The first plan of ``arch`` the IR allows, as if the policy did not preempt (the simulator runs it)."""
    import dataclasses

    plans, _ = enumerate_plans(analyze(dataclasses.replace(analysis.policy, preempt=None)), nodes=4)
    return next(p for p in plans if p.architecture is arch)


def test_a_live_switch_in_a_grace_drops_the_choice_and_the_new_plan_chooses_again():
    """Centralized -> centralized+heartbeat at 7, inside the grace of the choice made at 6 (A3 and A2, stops
    due at 8). The old selector's choice lapses at 8 (its server is retired); the new selector, waiting
    for room, rechecks at 8 and chooses the same victims: stopped at 8 + grace 2 = 10. Every task runs to
    its end exactly once and the truth's State is back to zero."""
    from ray_adaptive.sim.plan_sim import PlanSim

    a, plans, _ = plan_named("drf_reclaim")
    sim = PlanSim(lower(plans["centralized"], a, Profile(), nodes=4), reclaim_scenario(), deadline="start")
    sim.advance(7.0)
    assert {t.id: t.nominee.id for t in sim.tasks if t.nominee} == {"B0": "A3", "B1": "A2"}
    sim.switch(lower(plans["centralized+heartbeat 10ms"], a, Profile(), nodes=4), 7.0, pause_s=0.05)
    sim.run()
    t = {x.id: x for x in sim.tasks}
    assert [(x, t[x].stopped[0][0], t[x].stopped[0][2]) for x in ("A2", "A3")] == [("A2", "n2", 10.0), ("A3", "n3", 10.0)]
    assert (t["B0"].started_at, t["B1"].started_at) == (10.0, 10.0)
    assert {x.status for x in sim.tasks} == {"finished"} and sim.unresolved == 0
    assert sum(x.preemptions for x in sim.tasks) == 2
    state = sim.books.truth.state
    assert (state["tasks"], state["waiting"], state["tenants"]) == ({"A": 0, "B": 0}, {"A": 0, "B": 0}, 0)
    assert all(not v.any() for v in state["alloc"].values())
