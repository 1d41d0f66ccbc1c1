"""The plan simulator: agreement with the ideal replay, the mechanics of each architecture, metrics, traces."""

import dataclasses
import math

import numpy as np
import pytest

from ray_adaptive.compiler import PlanSpace, Profile, analyze, enumerate_plans, estimate_cost, lower
from ray_adaptive.dsl import load_policy
from ray_adaptive.sim import metrics, replay
from ray_adaptive.workload import scenario_from_dict
from ray_adaptive.sim.plan_sim import simulate
from ray_adaptive.plan import LoweredPlan, Plan, Role, Sync
from ray_adaptive.workload.trace import read_trace, write_trace
from ray_adaptive.workload.generate import Tenant, paper_workload, tenant_workload

DRF = load_policy("drf_lb")
A = analyze(DRF)
FIXED = Profile(default_unit_s=10e-6)


def sim_plan(name, nodes=12):
    plans, _ = enumerate_plans(A, nodes, PlanSpace())
    return lower(next(p for p in plans if p.name == name), A, FIXED, nodes)


def paper(rate, seconds=2.0, seed=1, **kw):
    return paper_workload(rate, seconds=seconds, seed=seed, **kw)


def outcome(tasks):
    return {t.id: (t.status, t.node.id if t.node else None, t.dispatched_at) for t in tasks}


@pytest.mark.parametrize("policy", ["drf_lb", "drf_lb_paper", "fifo", "least_loaded", "round_robin", "weighted_fair"])
@pytest.mark.parametrize("arch, kw", [("centralized", {}), ("decentralized", {"schedulers": 1, "sync": Sync.instant()})])
def test_a_plan_with_zero_latency_is_the_ideal_scheduler(policy, arch, kw):
    """One scheduler that decides instantly on exact State makes exactly the ideal replay's decisions."""
    p = load_policy(policy)
    d = paper_workload(600, seconds=0.8, seed=4)
    given = [{**t.fields, "weight": 1.0, "cost": 0.02} for t in d.tasks]
    sc = dataclasses.replace(d, tasks=tuple(dataclasses.replace(t, fields={f.name: g[f.name] for f in p.task_fields})
                                            for t, g in zip(d.tasks, given)))
    ideal = replay(p, sc)
    r = simulate(LoweredPlan(Plan("zero", arch, **kw), p), sc, deadline="start")
    assert outcome(r.tasks) == outcome(ideal.tasks)
    assert r.metrics().cr["mean"] == 1.0


def test_deterministic_for_a_seed():
    sc = paper(650, seconds=1.0)
    plan = sim_plan("decentralized+power-of-2+sync 100ms")
    a, b = simulate(plan, sc, seed=3), simulate(plan, sc, seed=3)
    assert outcome(a.tasks) == outcome(b.tasks) and a.metrics() == b.metrics()
    c = simulate(plan, sc, seed=4)
    assert outcome(c.tasks) != outcome(a.tasks)


@pytest.mark.parametrize("name", ["centralized", "centralized+power-of-2", "centralized+heartbeat 10ms", "hybrid",
                                  "hybrid+heartbeat 10ms"])
def test_estimated_throughput_is_the_simulated_goodput_where_the_scheduler_is_the_bottleneck(name):
    plans, _ = enumerate_plans(A, 12, PlanSpace())
    plan = next(p for p in plans if p.name == name)
    est = estimate_cost(plan, A, FIXED, 12)
    assert est.throughput < 500  # below the nodes' execution bound (~510/s): the scheduler is the bottleneck
    r = simulate(lower(plan, A, FIXED, 12), paper(800, seconds=2.0), warmup=0.5, record_cr=False)
    assert r.metrics().goodput == pytest.approx(est.throughput, rel=0.10)


def test_every_task_is_accounted_for_and_nodes_never_overfill():
    sc = paper(700, seconds=1.0)
    for name in ("centralized", "decentralized+heartbeat 10ms+sync 100ms", "hybrid+power-of-2"):
        r = simulate(sim_plan(name), sc, prefill=True)
        assert {t.status for t in r.tasks} <= {"finished", "dropped"}
        dispatched = [t for t in r.tasks if t.node is not None]
        assert all(t.status == "finished" for t in dispatched)  # deadline=dispatch: a placed task runs
        # at any instant a node holds at most executors + queue tasks (Cluster raises otherwise); check starts
        for node_id in {t.node.id for t in dispatched}:
            starts = sorted((t.started_at, t.finished_at) for t in dispatched if t.node.id == node_id)
            assert all(b[0] >= a[1] - 1e-12 for a, b in zip(starts, starts[1:]))  # one executor: FIFO, no overlap


def test_hybrid_selector_forwards_only_while_its_slot_accounting_shows_room():
    sc = paper(900, seconds=2.5)
    r = simulate(sim_plan("hybrid"), sc)
    sel = next(s for s in r.schedulers if s.role == "selector")
    placed = sum(s.decisions for s in r.schedulers if s.role is Role.SCHEDULERS)
    assert sel.decisions == placed  # every forwarded task was placed: none waited at a placement scheduler to expire
    dropped = [t for t in r.tasks if t.status == "dropped"]
    assert dropped and all(t.dispatched_at is None for t in dropped)  # the backlog waited at the selector


def test_decentralized_periodic_sync_merges_deltas_exactly():
    """With add-deltas, every replica ends with the exact State: all allocations released."""
    sc = paper(400, seconds=0.6)
    from ray_adaptive.sim.plan_sim import PlanSim

    ps = PlanSim(sim_plan("decentralized+sync 100ms"), sc)
    ps.run()
    hooks = ps.books.hooks
    for s in ps.hosts[0]:  # (every scheduler: one not used yet is made now)
        hooks.push_pull(s.interp, s.unpushed)
    for v in hooks.store["alloc"].values():
        assert np.allclose(v, 0.0)
    assert all(np.allclose(x, 0.0) for x in ps.books.truth.state["alloc"].values())


def test_a_periodic_sync_costing_more_than_its_period_still_lets_decisions_through():
    """A measured store round trip of 50 ms against a 100 ms sync (a sync costs two): syncs queued
    behind each other starved every decision, and with no timeouts the replay never ended."""
    plans, _ = enumerate_plans(A, 4, PlanSpace())
    plan = next(p for p in plans if p.name == "decentralized+sync 100ms")
    slow = lower(plan, A, dataclasses.replace(FIXED, store_s=0.05), 4)
    tasks = [{"id": f"t{i}", "arrival": i * 0.005, "duration": 0.03, "fields": {"tenant": "ab"[i % 2], "resource_vec": [0.1, 0.2, 0.1]}}
             for i in range(60)]
    sc = scenario_from_dict({"nodes": [{"id": f"n{i}", "executors": 1, "queue": 1} for i in range(4)], "tasks": tasks})
    import threading

    out = []
    run = threading.Thread(target=lambda: out.append(simulate(slow, sc)), daemon=True)  # (fail, not hang, if it loops)
    run.start()
    run.join(60)
    assert out, "the replay did not end"
    assert all(t.status == "finished" for t in out[0].tasks)  # slow, but every task served


def test_delta_hooks_change_nothing_but_speed():
    sc = paper(650, seconds=0.8)
    plan = sim_plan("decentralized+sync 100ms")
    slow = dataclasses.replace(plan, delta_hooks=())
    assert outcome(simulate(plan, sc).tasks) == outcome(simulate(slow, sc).tasks)


def test_decentralized_with_submitter_homes_is_unfair_under_contention():
    """A slot goes to whichever scheduler asks first: the tenant with 3x the clients gets ~3x the service."""
    sc = paper(800, seconds=2.5)
    d = simulate(sim_plan("decentralized+sync 100ms"), sc, warmup=0.5).metrics()
    c = simulate(sim_plan("centralized"), sc, warmup=0.5).metrics()
    assert d.jfi < 0.9 < 0.98 < c.jfi
    assert d.service["greedy"] > 1.1 > 0.9 > d.service["a"]
    assert d.cr["mean"] > 1.5 and c.cr["mean"] < 1.2


def test_prefill_starts_from_a_saturated_cluster():
    sc = paper(700, seconds=0.3)
    r = simulate(sim_plan("decentralized+sync 100ms"), sc, prefill=True)
    early = [t for t in r.tasks if t.arrival < 0.02]
    assert all(t.dispatched_at is None or t.dispatched_at > t.arrival for t in early)  # nowhere to go at first
    assert r.metrics().cr["mean"] > 1.2  # contention from the start


# ------------------------------------------------------------------ metrics

def test_competitive_ratio_handles_zero_and_negative_ideal_scores():
    # paper ratio when S* is large; regret in units of the scale when S* is 0 or negative
    r = metrics.decision_ratios([120, 1, -5, math.inf], [100, 0, -10, 3], scale=2.0)
    assert list(r) == [1.2, 1.5, 3.5, 100.0]
    assert metrics.score_scale([0, 0, 4, -2, math.inf]) == 3.0
    # the yardstick moves with the scores, not in jumps: DRF-LB's shares step by 100 (one task), and a
    # median between two steps flipped 200 <-> 300 between runs of one plan (issue 23)
    flips = [metrics.score_scale([200] * (50 + d) + [300] * (50 - d)) for d in (-2, 2)]
    assert flips[0] - flips[1] < 10
    assert metrics.competitive_ratio([], [])["mean"] == 1.0
    assert metrics.decision_ratios([5], [10], 1.0)[0] == 1.0  # a pair among the ideal's m is ideal


def test_metrics_of_a_run():
    sc = paper(300, seconds=1.5)
    m = simulate(sim_plan("centralized"), sc, warmup=0.3).metrics()
    assert 270 < m.goodput < 330 and m.dropped == 0 and m.jfi > 0.99
    assert set(m.service) == {"a", "b", "greedy"}
    assert 0.0235 <= m.response_p50 < m.response_p99 < 0.2
    assert 0 < m.utilisation["selector"] < 1


# -------------------------------------------------------------- workloads

def test_tenant_workload_rates_clients_and_durations():
    sc = tenant_workload([Tenant("a", 100, durations="exponential", duration=0.01),
                          Tenant("g", 300, arrivals="bursty", burst=10)], seconds=20.0, nodes=4, seed=2)
    a = [t for t in sc.tasks if t.fields["tenant"] == "a"]
    g = [t for t in sc.tasks if t.fields["tenant"] == "g"]
    assert len(a) / 20 == pytest.approx(100, rel=0.05) and len(g) / 20 == pytest.approx(300, rel=0.1)
    assert np.mean([t.duration for t in a]) == pytest.approx(0.01, rel=0.05)
    assert {t.submitter for t in g} == {"g/0", "g/1", "g/2"}
    gaps = np.diff([t.arrival for t in g])
    assert np.mean(gaps < 0.002) > 0.7  # bursty: most tasks arrive right after another
    assert tenant_workload([Tenant("a", 50)], 1.0, seed=7) == tenant_workload([Tenant("a", 50)], 1.0, seed=7)
    with pytest.raises(ValueError, match="arrivals of tenant 'x' must be one of poisson, bursty"):
        Tenant("x", 1.0, arrivals="uniform")



def test_bursty_arrivals_never_start_before_zero():
    """A burst starting in the first 0.5 ms once put its first task before 0, and the scenario was
    refused ('arrival' must be >= 0): release_tests/agreement_compiler.py --smoke-test failed so."""
    from ray_adaptive.workload.scenario import scenario_from_dict, scenario_to_dict

    for seed in range(20):
        sc = tenant_workload([Tenant("x", 5000, arrivals="bursty", burst=10)], seconds=0.2, nodes=4, seed=seed)
        assert min(t.arrival for t in sc.tasks) >= 0.0
        assert scenario_from_dict(scenario_to_dict(sc)) == sc  # (a scenario file of it is accepted, and reads back)

# ------------------------------------------------------------------- traces

@pytest.mark.parametrize("ext", ["csv", "parquet"])
def test_trace_round_trip_with_outcomes(tmp_path, ext):
    if ext == "parquet":
        pytest.importorskip("pyarrow")
    sc = paper(300, seconds=0.3)
    r = simulate(sim_plan("hybrid"), sc)
    path = tmp_path / f"run.{ext}"
    write_trace(path, r.tasks, r.placed_by)
    back = read_trace(path)
    assert back == tuple(sorted(sc.tasks, key=lambda t: (t.arrival, t.id)))
    import pandas as pd

    df = pd.read_csv(path) if ext == "csv" else pd.read_parquet(path)
    assert set(df["status"]) == {"finished"} and df["scheduler"].str.startswith("s").all()


@pytest.mark.parametrize("content, message", [
    ("id,arrival\nt0,0.1\nt0,0.2\n", "row 3 (id 't0'): duplicate task id"),
    ("id,arrival,duration\nt0,0.1,-1\n", "row 2 (id 't0'): column 'duration' must be >= 0"),
    ("id,arrival,speed\nt0,0.1,3\n", "unknown column 'speed'"),
    ("arrival\n0.1\n", "missing column 'id'"),
    ("id,arrival,task.resource_vec\nt0,0.1,[0.1\n", "column 'task.resource_vec': invalid JSON"),
    ("id,arrival\nt0,0.1\nt1,x\n", "row 3 (id 't1'): column 'arrival' must be a number, found 'x'"),
    ("id,arrival\nt0,0.1\nt1,\n", "row 3 (id 't1'): column 'arrival' is empty"),
    ("id,arrival,timeout\nt0,0.1,\nt1,0.2,-3\n", "row 3 (id 't1'): column 'timeout' must be >= 0"),
    ("id,arrival,resources\nt0,0.1,\nt1,0.2,[1]\n", "row 3 (id 't1'): column 'resources' must be a JSON object"),
])
def test_trace_errors_name_row_and_column(tmp_path, content, message):
    from ray_adaptive.errors import ScenarioError

    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        read_trace(path)


def test_trace_rows_get_their_own_field_values(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('id,arrival,timeout,task.v,task.m\nt0,0.1,,"[1, 2]","{""a"": [1]}"\n'
                    't1,0.2,inf,"[1, 2]","{""a"": [1]}"\n')
    a, b = read_trace(path)
    assert a.fields == b.fields == {"v": [1, 2], "m": {"a": [1]}} and a.timeout == b.timeout == float("inf")
    a.fields["v"].append(3)
    a.fields["m"]["a"].append(2)
    assert b.fields == {"v": [1, 2], "m": {"a": [1]}}  # one parse per distinct text, not one shared value


# ------------------------------------------------------- replays that stop once settled

def test_settle_stops_a_replay_only_once_its_ratio_is_surely_above_the_limit():
    rule = metrics.Settle(limit=1.2)
    rng = np.random.default_rng(0)
    ideal = [10.0] * 200
    far = list(10.0 * (1 + rng.uniform(0.6, 1.0, 200)))  # ratios 1.6-2.0: far above the limit
    assert not rule.done(far[:99], ideal[:99])  # 3 batches of 25: too few to judge
    assert rule.done(far, ideal)
    near = list(10.0 * (1 + rng.uniform(0.0, 0.4, 200)))  # ratios 1.0-1.4 around 1.2: neither side is sure
    assert not rule.done(near, ideal)
    # all ideal, far below the limit: a calm stretch, not a settled ratio -- contention comes in episodes
    # (bursts, a backlog building at the bound) that the rest of the replay may still meet
    assert not rule.done(ideal, ideal)
    assert not metrics.Settle(limit=None).done(far, ideal)  # no limit: nothing to be above
    with pytest.raises(ValueError, match="min_batches >= 2"):
        metrics.Settle(min_batches=1)


def test_a_settled_replay_stops_early_above_the_limit_only():
    sc = paper(700, seconds=1.0)
    whole = simulate(sim_plan("decentralized+sync 100ms"), sc, prefill=True, cr_from=0.3)
    short = simulate(sim_plan("decentralized+sync 100ms"), sc, prefill=True, cr_from=0.3,
                     settle=metrics.Settle(limit=1.2))
    assert short.events < whole.events / 2 and 100 <= short.cr_impl.size < whole.cr_impl.size
    assert whole.metrics().cr["mean"] > 1.2 and short.metrics().cr["mean"] > 1.2
    assert short.window[1] < whole.window[1]  # the metrics cover the replayed part only
    within = [simulate(sim_plan("centralized"), sc, prefill=True, cr_from=0.3, settle=s)
              for s in (None, metrics.Settle(limit=1.2))]
    assert within[0].events == within[1].events and within[1].metrics().cr["mean"] <= 1.2
