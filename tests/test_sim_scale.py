"""The simulator at scale: the same run whichever way candidates are scored; idle schedulers cost nothing;
rates that change over time."""

import dataclasses

import numpy as np
import pytest

from ray_adaptive.compiler import PlanSpace, Profile, analyze, enumerate_plans, lower
from ray_adaptive.dsl import load_policy
from ray_adaptive.sim import cluster
from ray_adaptive.sim.plan_sim import PlanSim, simulate
from ray_adaptive.sim.timeline import run_epochs
from ray_adaptive.workload import scenario_from_dict
from ray_adaptive.workload.generate import Tenant, tenant_workload
from ray_adaptive.workload.rates import RateProfile, parse_profile, profile_from_dict, retime

FIXED = Profile(default_unit_s=10e-6)


def plans(policy, nodes):
    a = analyze(load_policy(policy))
    return a, {p.name: p for p in enumerate_plans(a, nodes, PlanSpace())[0]}


def outcome(r):
    return [(t.id, t.status, t.node.index if t.node else None, t.dispatched_at) for t in r.tasks], list(r.cr_impl)


@pytest.mark.parametrize("policy, name", [("drf_lb", "decentralized+sync 100ms"), ("drf_lb", "hybrid+heartbeat 10ms"),
                                          ("bin_pack", "centralized"), ("least_loaded", "decentralized+power-of-2")])
def test_numpy_candidates_make_the_same_run_as_a_list(monkeypatch, policy, name):
    """Above cluster.SMALL nodes, candidates are index arrays scored by table look-up: the same decisions."""
    a, space = plans(policy, 40)
    sc = tenant_workload([Tenant("a", 400), Tenant("b", 1200)], 0.6, nodes=40, seed=3)
    if policy != "drf_lb":  # (a policy without Task fields)
        sc = dataclasses.replace(sc, tasks=tuple(dataclasses.replace(t, fields={}) for t in sc.tasks))
    plan = lower(space[name], a, FIXED, 40)
    fast = simulate(plan, sc, prefill=True, seed=1)
    monkeypatch.setattr(cluster, "SMALL", 10_000)
    assert outcome(simulate(plan, sc, prefill=True, seed=1)) == outcome(fast)


def test_idle_replicas_cost_no_events_and_catch_up_when_reached():
    """200 schedulers syncing every 100 ms for 3 s are 6,000 rounds; two tasks reach two of them."""
    a, space = plans("drf_lb", 200)
    tasks = [{"id": f"t{i}", "arrival": at, "duration": 0.02, "submitter": f"c{i}",
              "fields": {"tenant": "ab"[i], "resource_vec": [0.1, 0.2, 0.1]}} for i, at in enumerate((0.05, 2.95))]
    sc = scenario_from_dict({"nodes": [{"id": f"n{i}"} for i in range(200)], "tasks": tasks})
    sim = PlanSim(lower(space["decentralized+sync 100ms"], a, FIXED, 200), sc)
    r = sim.run()
    assert r.events < 100 and len(r.schedulers) == 2  # only the two schedulers reached were made
    assert all(t.status == "finished" for t in r.tasks)
    late = sim.servers()[1]  # dormant from its first round to 2.95 s: it pulled the store as of its last round
    assert late.name == "s1"
    assert late.interp.state["alloc"]["a"].tolist() == pytest.approx([0.0, 0.0, 0.0])  # a's task had left
    busy = sum(s.busy_s for s in r.schedulers)
    assert busy > 0.7e-3 * 2 * 25  # the skipped rounds' sync work is counted


def test_rate_profiles_drive_arrivals_and_retime_traces():
    p = parse_profile("steps:0=1,2=4,4=1")
    sc = tenant_workload([Tenant("a", 100), Tenant("b", 300, arrivals="bursty")], 6.0, nodes=2, seed=1, profile=p)
    t = np.array([x.arrival for x in sc.tasks])
    per_s = [((t >= s) & (t < s + 1)).sum() for s in range(6)]
    assert 250 < per_s[0] < 550 and 1300 < per_s[2] < 1900 and 200 < per_s[5] < 600  # (bursts: a noisy count)
    for text in ("ramp:0=100,10=900", "sine:mean=400,amplitude=300,period=20", "bursts:base=2,peak=10,every=5,length=1",
                 "const:7"):
        prof = parse_profile(text)
        assert parse_profile(prof.label()) == prof == profile_from_dict(prof.as_dict())
    assert parse_profile("sine:mean=400,amplitude=300,period=20").at(5.0) == pytest.approx(700.0)
    tasks = tenant_workload([Tenant("a", 50)], 20.0, nodes=1, seed=2).tasks
    moved = retime(tasks, parse_profile("ramp:0=100,10=900"))
    assert [x.id for x in moved] == [x.id for x in tasks]
    arr = np.array([x.arrival for x in moved])
    assert ((arr < 1).sum(), (arr >= 3).sum()) == (pytest.approx(140, abs=2), pytest.approx(len(tasks) - 660, abs=3))  # 100 t + 40 t^2 by t


@pytest.mark.parametrize("text, message", [
    ("wave:1", "KIND one of const, steps"), ("steps:1=2,0=1", "increasing order"), ("sine:mean=1,amplitude=2,period=3",
                                                                              "amplitude <= mean"),
    ("bursts:base=1,peak=2,every=1", "missing length"), ("steps:0=x", "a rate must be a number"),
])
def test_rate_profile_errors_say_what_was_expected(text, message):
    with pytest.raises(ValueError, match=message):
        parse_profile(text)


def test_a_run_seen_epoch_by_epoch_follows_the_rate():
    a, space = plans("drf_lb", 12)
    p = RateProfile("steps", points=((0.0, 150.0), (1.0, 450.0)))
    sc = tenant_workload([Tenant("a", 0.5), Tenant("b", 0.5)], 2.0, nodes=12, seed=5, profile=p)
    seen = []
    epochs = run_epochs(PlanSim(lower(space["centralized"], a, FIXED, 12), sc), 0.5,
                        on_epoch=lambda e, sim: seen.append((e.end, sim.loop.now <= e.end)))
    assert [round(e.offered, -2) for e in epochs] == [100, 200, 500, 500] or 120 < epochs[0].offered < 180
    assert epochs[3].offered > 2.5 * epochs[0].offered and all(ok for _, ok in seen) and len(seen) == 4
