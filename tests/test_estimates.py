"""The compiler's quality estimate: a window that shows what a plan hides, intervals and the at-risk rule,
and fairness judged against weighted shares."""

import math

import numpy as np
import pytest

from ray_adaptive.compiler import PlanSpace, Profile, analyze, choose, compile_policy, enumerate_plans, lower
from ray_adaptive.compiler.estimates import Estimate
from ray_adaptive.compiler.enumeration import Plan
from ray_adaptive.compiler.window import window_size
from ray_adaptive.dsl import load_policy
from ray_adaptive.plan import LoadView, Sync
from ray_adaptive.sim import metrics
from ray_adaptive.sim.fairness import tenant_weights, weight_field
from ray_adaptive.sim.plan_sim import simulate
from ray_adaptive.workload.generate import Tenant, policy_workload

FIXED = Profile(default_unit_s=10e-6)


# ------------------------------------------------------------------ window

def test_a_plan_synced_every_100ms_is_replayed_over_several_periods():
    """The paper's workload on 200 nodes at 1.27x: 600 tasks span 55 ms of arrivals, half a sync period,
    and replicas never diverged while the ratio was estimated (issue 23). The window is sized in time."""
    w = window_size(rate=10_795, capacity=8_500, periods_s=(0.1, 0.01), clients=5, timeout=1.0)
    assert w.sample_s >= 4 * 0.1 and w.tasks >= 0.4 * 10_795
    # many clients need more; a cap bounds the cost
    assert window_size(rate=1000, capacity=4000, periods_s=(), clients=400, timeout=1.0).sample_s >= 400 * 8 / 1000
    big = window_size(rate=85_000, capacity=42_500, periods_s=(0.1,), clients=5, timeout=1.0, max_tasks=30_000)
    assert big.capped and big.tasks == 30_000 and big.sample_s >= 0.3


def test_near_the_execution_bound_the_replay_samples_several_timeouts():
    """At the 12-node bound a backlog builds for seconds and the ratio of a decentralized plan swings with
    it (1.0-1.9 from one second to the next): 0.4 s sampled after a timeout's warm-up estimated 1.06-1.10
    for plans the simulator found at 1.4-2.8 (issue 23). The sample covers 3 timeouts after a warm-up of one."""
    for rate in (495, 510, 520):
        knee = window_size(rate=rate, capacity=510, periods_s=(0.1, 0.01), clients=5, timeout=1.0)
        assert knee.warm_s == 1.0 and knee.sample_s >= 3.0 and "near the execution bound" in knee.why
    far = window_size(rate=300, capacity=510, periods_s=(0.1, 0.01), clients=5, timeout=1.0)
    assert far.tasks == 600 and "near" not in far.why  # (the fewest tasks; no timeouts sampled)
    # at a thousand nodes the cap cuts the timeouts first, then the warm-up: the periods are still sampled
    big = window_size(rate=42_500, capacity=42_500, periods_s=(0.1, 0.01), clients=5, timeout=1.0)
    assert big.capped and big.tasks == 30_000 and big.sample_s == pytest.approx(0.4) and big.warm_s > 0.25


def test_the_interval_is_taken_over_batches_as_long_as_a_backlog_lasts():
    """Bursty arrivals at 0.78x the bound: episodes of contention last up to a task timeout, and batches of
    0.38 s gave an interval up to 1.17 for a plan at 1.20-1.32 in runs of 15 s (issue 23). With three
    timeouts sampled, the batches are a timeout long; deciding to stop early (above the limit) takes the
    shorter ones, and so does a sample too short for three."""
    w = window_size(rate=530, capacity=680, periods_s=(0.1, 0.01), clients=5, timeout=1.0, dispersion=15)
    assert w.sample_s >= 3.0 and w.batch_s(0.1) == 1.0
    assert w.batch_s(0.1, backlogs=False) == pytest.approx(w.sample_s / 8)
    short = window_size(rate=300, capacity=510, periods_s=(0.1,), clients=5, timeout=1.0)
    assert short.batch_s(0.1) == pytest.approx(max(0.05, short.sample_s / 8))
    assert window_size(rate=510, capacity=510, periods_s=(), clients=5, timeout=math.inf).batch_s(0.0) < 0.1


def test_at_the_execution_bound_a_decentralized_plan_is_not_chosen_on_a_calm_start():
    """DRF-LB at the 12-node execution bound: the compiler chose decentralized+power-of-2+store per
    decision, estimated 1.07 (interval up to 1.13) from 0.4 s after a second's warm-up; the simulator put
    it at 1.4-1.75 (reproduce --adaptive, phase 2), and 2.5 once the backlog has built (issue 23)."""
    c = compile_policy(load_policy("drf_lb"), rate=510, profile=FIXED, measure=False, workers=1,
                       space=PlanSpace(architectures=("decentralized", "hybrid"), heartbeat_s=()))
    assert c.size.sample_s >= 3.0 and c.choice.estimate.plan.architecture.value == "hybrid"
    replayed = [e for e in c.estimates if "ci" in e.quality and e.plan.architecture.value == "decentralized"]
    assert replayed and all(e.interval[1] > 1.2 for e in replayed)


def test_the_compiled_window_covers_the_periods_and_the_replays_do_too():
    """100 nodes at 40% of their execution bound: 600 tasks would span 0.35 s, less than 4 sync periods."""
    c = compile_policy(load_policy("drf_lb"), rate=1700, nodes=100, profile=FIXED, measure=False, workers=1, replay="all",
                       space=PlanSpace(architectures=("decentralized",), sample_d=(2,), heartbeat_s=()))
    assert c.size.sample_s >= 0.4 and c.window.tasks[-1].arrival >= c.size.warm_s + 0.4 - 0.01
    end = c.window.tasks[-1].arrival
    synced = [e for e in c.estimates if e.plan.sync.kind.value == "periodic" and e.competitive_ratio <= 1.2]
    assert synced
    for e in synced:  # within the limit: replayed to the window's end
        assert e.quality["replayed_s"] >= end - 1e-6, e.plan.name
    assert "window:" in c.format()


# ----------------------------------------------------------- interval and choice

def test_bursty_arrivals_lengthen_the_sample():
    from ray_adaptive.compiler.window import arrival_dispersion

    rng = np.random.default_rng(1)
    poisson = np.sort(rng.uniform(0, 5, 3000))
    bursty = np.sort(np.concatenate([s + np.arange(8) * 0.0005 for s in rng.uniform(0, 5, 375)]))
    d = arrival_dispersion(bursty)
    assert arrival_dispersion(poisson) < 1.5 < 5 < d
    calm = window_size(rate=500, capacity=680, periods_s=(0.1,), clients=5, timeout=1.0)  # (below the knee)
    busy = window_size(rate=500, capacity=680, periods_s=(0.1,), clients=5, timeout=1.0, dispersion=d)
    assert busy.sample_s > 3 * calm.sample_s and "bursty" in busy.why


def test_bursty_arrivals_widen_the_ratios_interval_by_their_design_effect():
    calm = window_size(rate=500, capacity=680, periods_s=(0.1,), clients=5, timeout=1.0)
    busy = window_size(rate=500, capacity=680, periods_s=(0.1,), clients=5, timeout=1.0, dispersion=4.0)
    assert calm.design_effect == 1.0 and busy.design_effect == pytest.approx(2.0)
    rng = np.random.default_rng(0)
    impl, times = 1 + rng.exponential(0.2, 400), np.linspace(0, 4, 400)
    plain = metrics.competitive_ratio(impl, np.ones(400), scale=1.0, times=times, batch_s=0.5)
    wide = metrics.competitive_ratio(impl, np.ones(400), scale=1.0, times=times, batch_s=0.5, widen=2.0)
    assert wide["mean"] == plain["mean"]
    assert wide["ci"][1] - wide["mean"] == pytest.approx(2 * (plain["ci"][1] - plain["mean"]), abs=2e-4)


def test_bursty_arrivals_below_the_bound_do_not_choose_a_plan_their_bursts_push_out():
    """Two bursty tenants at 0.78x of the bound (check_estimates' one failing point, issue 23): on this
    trace decentralized+heartbeat 10ms+sync 100ms was estimated at 1.06 (interval to 1.15) and chosen;
    the simulator's runs of it sit at 1.24-1.31. Its interval, widened by the bursts' design effect,
    reaches above the limit: at risk, it loses to hybrid."""
    from ray_adaptive.experiments.reproduce import WORKLOADS

    exp = next(w for w in WORKLOADS if "bursty" in w.name)
    rate = 0.78 * exp.capacity
    c = compile_policy(load_policy(exp.policy), rate=rate, trace=exp.workload(rate, 60.0, seed=3).tasks,
                       nodes=exp.nodes, executors=exp.executors, queue=exp.queue, profile=FIXED, measure=False,
                       limit=exp.limit, seed=2, workers=1, replay="all")
    d = c.estimate("decentralized+heartbeat 10ms+sync 100ms")
    assert d.interval[1] > c.limit, (d.interval, c.limit)
    assert not c.choice.estimate.plan.name.startswith("decentralized"), c.choice.estimate.plan.name


def test_batch_means_interval_widens_for_correlated_batches():
    rng = np.random.default_rng(0)
    walk = 1.1 + np.cumsum(rng.normal(0, 0.02, 40))  # strongly correlated batch means
    _, h_walk = metrics.mean_interval(walk)
    sd_walk = float(np.std(walk, ddof=1))
    assert h_walk > 2.02 * sd_walk / math.sqrt(40)  # wider than the i.i.d. formula says
    assert metrics.mean_interval([1.0])[1] == math.inf
    times = np.arange(100) * 0.01
    assert metrics.batch_means(np.ones(100), times, batch_s=0.1).size == 10


def est(name, arch, lat, tp, cr, ci):
    return Estimate(Plan(name, arch, LoadView(), Sync(), 0, ()), (), lat, lat, 0.0, {}, 1.0, tp, cr, {"ci": ci})


def test_a_plan_at_risk_loses_to_one_safely_within_the_limit_unless_none_is():
    c = est("C", "centralized", 2.5e-3, 400, 1.0, [1.0, 1.0])
    d = est("D", "decentralized", 2.5e-3, 2000, 1.15, [1.05, 1.31])
    h = est("H", "hybrid", 4e-3, 470, 1.01, [1.0, 1.02])
    chosen = choose([c, d, h], rate=420, limit=1.2)
    assert chosen.estimate.plan.name == "H"
    assert chosen.verdicts["D"].why.startswith("at risk: competitive ratio 1.15, but its 95% interval reaches 1.31")
    only = choose([d], rate=420, limit=1.2)  # none is safe: the one at risk counts as within
    assert only.estimate.plan.name == "D" and "at risk, as every plan" in only.verdicts["D"].why


def test_near_ties_go_to_the_plan_further_within_the_limit():
    """Six tenants on 16 nodes at 0.9x the bound: decentralized+heartbeat+sync (2.15 ms, ratio 1.12, its
    interval up to 1.16) and decentralized+power-of-2+sync (2.22 ms, 1.03 up to 1.04), equally simple, are
    near-ties; the first won on its 3% lower latency, and the simulator put it at 1.23 (issue 23)."""
    hb = est("D+hb", "decentralized", 2.15e-3, 3874, 1.12, [1.09, 1.16])
    p2 = est("D+p2", "decentralized", 2.22e-3, 3976, 1.03, [1.01, 1.04])
    c = choose([hb, p2], rate=480, limit=1.2)
    assert c.estimate.plan.name == "D+p2" and "further within the limit" in c.why
    assert choose([hb, p2], rate=480, limit=None).estimate.plan.name == "D+hb"  # no limit: latency decides
    central = est("C", "centralized", 2.25e-3, 4000, 1.15, [1.1, 1.19])
    assert choose([hb, p2, central], rate=480, limit=1.2).estimate.plan.name == "C"  # the simpler plan first


def test_the_chosen_verdict_reads_as_a_choice_not_a_rejection():
    d = est("D", "decentralized", 2.5e-3, 2000, 2.0, [1.8, 2.2])
    h = est("H", "hybrid", 4e-3, 470, 1.01, [1.0, 1.02])
    c = choose([d, h], rate=100_000, limit=1.2)
    assert c.estimate.plan.name == "H"
    assert c.verdicts["H"].why == ("no plan carries 100000 tasks/s (+10% headroom); chosen for the highest "
                                   "throughput within the limit (470 tasks/s)")
    assert "<" not in c.verdicts["H"].why


def test_a_plan_whose_heartbeats_outlast_their_period_is_not_replayed():
    a = analyze(load_policy("drf_lb"))
    c = compile_policy(load_policy("drf_lb"), rate=300, nodes=400, profile=FIXED, measure=False, workers=1, window=60,
                       max_window=200, space=PlanSpace(architectures=("centralized",), sample_d=(2,)))
    hb = c.estimate("centralized+heartbeat 10ms")  # 400 load reports of 35 us every 10 ms: 140% busy
    assert hb.throughput == 0 and math.isnan(hb.competitive_ratio) and "longer than the 10 ms period" in hb.cannot_run
    assert c.choice.verdicts[hb.plan.name].why.startswith("cannot run")
    plans, _ = enumerate_plans(a, 400, PlanSpace(architectures=("centralized",)))
    with pytest.raises(ValueError, match="cannot run: a heartbeat round"):
        simulate(lower(next(p for p in plans if p.name == "centralized+heartbeat 10ms"), a, FIXED, 400),
                 c.window)


# --------------------------------------------------------------- weighted JFI

def test_weighted_max_min_shares_by_hand():
    """Capacity 90; demands a 50, b 50, c 10; weights 1, 2, 1. Water-filling by weight: the level 90 / 4 =
    22.5 per unit of weight covers c's 10; the 80 left over weights 1 + 2 gives b 53.3 > its 50: b gets 50,
    a the remaining 30."""
    fair = metrics.max_min_fair_share({"a": 50, "b": 50, "c": 10}, 90, weights={"a": 1, "b": 2, "c": 1})
    assert fair == pytest.approx({"a": 30.0, "b": 50.0, "c": 10.0})
    ratios = metrics.service_ratios({"a": 30, "b": 25, "c": 10}, {"a": 50, "b": 50, "c": 10}, 65 + 25,
                                    weights={"a": 1, "b": 2, "c": 1})
    assert ratios == pytest.approx({"a": 1.0, "b": 0.5, "c": 1.0})
    assert metrics.jain_index(ratios.values()) == pytest.approx(2.5 ** 2 / (3 * 2.25))  # 0.926
    # unweighted: 30 each for a and b (c's 10 met), so b's 25 looks nearly fair
    assert metrics.service_ratios({"a": 30, "b": 25, "c": 10}, {"a": 50, "b": 50, "c": 10}, 90)["b"] == pytest.approx(25 / 40)
    with pytest.raises(ValueError, match="weights must be > 0"):
        metrics.max_min_fair_share({"a": 1}, 1, weights={"a": 0})


def test_a_weighted_policy_is_judged_against_its_weights():
    """weighted_fair at 1.5x the execution bound, weights 1:2:3:4: the centralized plan serves by weight
    (fair by weighted shares), a decentralized one serves every client alike (unfair by them)."""
    wf = load_policy("weighted_fair")
    assert weight_field(wf) == "weight" and weight_field(load_policy("drf_lb")) is None
    tenants = [Tenant(n, 190, fields={"weight": float(w), "cost": 1.0}) for n, w in zip("abcd", (1, 2, 3, 4))]
    sc = policy_workload(wf, tenants, 1.5, nodes=12, seed=2)
    assert tenant_weights(wf, sc.tasks) == {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}
    a = analyze(wf)
    plans = {p.name: p for p in enumerate_plans(a, 12)[0]}
    c = simulate(lower(plans["centralized"], a, FIXED, 12), sc, warmup=0.5, prefill=True).metrics()
    d = simulate(lower(plans["decentralized+store per decision"], a, FIXED, 12), sc, warmup=0.5, prefill=True)
    assert c.jfi > 0.97 and c.service["a"] == pytest.approx(1.0, abs=0.15)
    assert d.metrics().jfi < 0.85 < d.metrics(weights=None).jfi  # fair only by the shares it ignores


@pytest.mark.parametrize("rate", [120, 900])
def test_replaying_only_the_plans_that_decide_makes_the_same_choice(rate):
    kw = dict(rate=rate, window=200, max_window=400, profile=FIXED, measure=False, workers=1)
    lazy, full = (compile_policy(load_policy("drf_lb"), replay=r, **kw) for r in ("deciding", "all"))
    assert lazy.choice.estimate.plan.name == full.choice.estimate.plan.name
    skipped = [e for e in lazy.estimates if e.quality.get("skipped")]
    assert skipped and all(math.isnan(e.competitive_ratio) for e in skipped)
    assert all("not replayed" in lazy.choice.verdicts[e.plan.name].why for e in skipped)
