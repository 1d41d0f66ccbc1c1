"""The host model (Profile's host fields, estimates.host_bound) and its fit (compiler.calibration): no Ray."""

import dataclasses
import math

import pytest

from ray_adaptive.compiler import Profile, analyze, enumerate_plans, estimate_cost
from ray_adaptive.compiler.calibration import HOST_BOUND_SHARE, HostRun, fit_host, host_cpu
from ray_adaptive.dsl import load_policy

NODES = 4
# what release_tests/calibrate_host.py fitted on this 2-core machine (rounded)
HOST = Profile(message_s=0.9e-3, receive_s=0.3e-3, in_process_s=0.3e-3, task_cpu_s=1.1e-3, forward_s=0.25e-3,
               host_cores=1.3)


@pytest.fixture(scope="module")
def drf():
    a = analyze(load_policy("drf_lb"))
    plans = {p.name: p for p in enumerate_plans(a, NODES)[0]}
    return a, plans


def test_a_profile_without_a_host_is_the_papers_model(drf):
    a, plans = drf
    e = estimate_cost(plans["centralized"], a, Profile(), NODES, rate=5000.0)
    assert e.host_bound == math.inf and "host_bound" not in e.as_dict()
    assert e.throughput == pytest.approx(1 / e.selector_s)
    assert set(Profile().as_dict()) == {"message_s", "probe_s", "store_s", "heartbeat_s", "default_unit_s", "unit_s"}
    # a decentralized scheduler's hops and a selector's receive default to a message
    for name in ("decentralized+sync 100ms", "centralized", "hybrid"):
        same, default = (estimate_cost(plans[name], a, p, NODES)
                         for p in (Profile(in_process_s=0.7e-3, receive_s=0.7e-3, forward_s=0.7e-3), Profile()))
        assert (same.steps, same.throughput) == (default.steps, default.throughput), name


def test_the_host_bounds_the_throughput_and_falls_with_the_offer(drf):
    a, plans = drf
    c = plans["centralized"]
    low, high = (estimate_cost(c, a, HOST, NODES, rate=r) for r in (400.0, 1200.0))
    assert high.host_bound < low.host_bound < 1 / low.selector_s  # (the host is the knee here, not the selector)
    assert low.throughput == low.host_bound and low.as_dict()["host_bound"] == round(low.host_bound, 1)
    # each offered task costs the selector's receive, placed or not: 800 more a second cost 800 x receive_s
    per_placed = HOST.task_cpu_s + low.latency_s - low.steps[0].seconds
    assert (low.host_bound - high.host_bound) * per_placed == pytest.approx(800 * low.steps[0].seconds)
    # a decentralized scheduler in its submitter's process: cheaper hops, a higher bound than the selector's
    d = estimate_cost(plans["decentralized+sync 100ms"], a, HOST, NODES, rate=1200.0)
    assert d.host_bound > high.host_bound
    slower = estimate_cost(plans["decentralized+sync 100ms"], a, dataclasses.replace(HOST, in_process_s=None),
                           NODES, rate=1200.0)
    assert slower.host_bound < d.host_bound


def test_host_fields_round_trip_and_bad_values_are_named():
    assert Profile.from_dict(HOST.as_dict()) == HOST
    assert Profile.from_dict(Profile().as_dict()) == Profile()
    with pytest.raises(ValueError, match="host_cores must be > 0.*found 0"):
        Profile(host_cores=0)
    with pytest.raises(ValueError, match="receive_s must be None or a finite.*found -1"):
        Profile(receive_s=-1)
    with pytest.raises(ValueError, match="task_cpu_s must be a finite"):
        Profile(task_cpu_s=math.nan)


def _runs(a, plans, truth: Profile, active: float, idle: float) -> list:
    """Runs whose busy cores are exactly the model's under ``truth``: plain at two rates, centralized below
    and above its knee, decentralized below it, the hybrid above it (placing its host bound: None)."""
    shapes = [(None, 200, 200), (None, 1200, 1200), (plans["centralized"], 300, 300),
              (plans["centralized"], 900, None), (plans["decentralized+sync 100ms"], 400, 400),
              (plans["hybrid"], 600, None)]
    runs = []
    for plan, offered, placed in shapes:
        if placed is None:
            placed = estimate_cost(plan, a, truth, NODES, rate=offered).host_bound
            assert placed < HOST_BOUND_SHARE * offered
        r = HostRun(plan, offered, placed, 0.0)
        runs.append(dataclasses.replace(r, busy_cores=idle + active + host_cpu(r, a, truth, NODES)))
    return runs


def test_the_fit_recovers_the_costs_that_made_the_runs(drf):
    a, plans = drf
    runs = _runs(a, plans, HOST, active=0.6, idle=0.05)
    got, active = fit_host(a, NODES, runs, idle_cores=0.05, saturated_cores=1.95)
    assert active == pytest.approx(0.6)
    assert got.host_cores == pytest.approx(1.95 - 0.05 - 0.6)
    for k in ("message_s", "receive_s", "in_process_s", "task_cpu_s", "forward_s"):
        assert getattr(got, k) == pytest.approx(getattr(HOST, k)), k


def test_a_run_at_the_host_bound_counts_the_saturated_host_so_its_placed_is_predicted(drf):
    """Measured, a plan at its bound keeps a few hundredths of a core fewer busy than the saturated host.
    The fit takes such a run as the saturated host, the equation the bound's prediction solves: the costs
    that made the runs come back, and each bound run's placed is predicted as measured."""
    a, plans = drf
    runs = _runs(a, plans, HOST, active=0.6, idle=0.05)
    assert [r.busy_cores for r in runs if r.placed < HOST_BOUND_SHARE * r.offered] == pytest.approx([1.95, 1.95])
    short = [dataclasses.replace(r, busy_cores=r.busy_cores - 0.04) if r.placed < HOST_BOUND_SHARE * r.offered
             else r for r in runs]
    got, active = fit_host(a, NODES, short, idle_cores=0.05, saturated_cores=1.95)
    assert active == pytest.approx(0.6)
    for k in ("message_s", "receive_s", "task_cpu_s", "forward_s"):
        assert getattr(got, k) == pytest.approx(getattr(HOST, k)), k
    for r in short:
        if r.plan is not None and r.placed < HOST_BOUND_SHARE * r.offered:
            assert estimate_cost(r.plan, a, got, NODES, rate=r.offered).host_bound == pytest.approx(r.placed)


def test_the_hybrid_placement_hop_has_its_own_cost_and_follows_a_message_without_one(drf):
    """``forward_s`` prices only the hybrid's placement scheduler (the Ray runtime forwards in batches): a
    cheaper hop raises the hybrid's host bound and leaves the other plans alone. Fitted without a hybrid
    run, it is left unset, so the hop costs the fitted message."""
    a, plans = drf
    cheap = dataclasses.replace(HOST, forward_s=0.1e-3)
    for name in ("centralized", "decentralized+sync 100ms"):
        assert estimate_cost(plans[name], a, cheap, NODES, rate=900.0).host_bound == \
            estimate_cost(plans[name], a, HOST, NODES, rate=900.0).host_bound, name
    h = plans["hybrid"]
    assert estimate_cost(h, a, cheap, NODES, rate=900.0).host_bound > estimate_cost(h, a, HOST, NODES, rate=900.0).host_bound
    without = [r for r in _runs(a, plans, HOST, active=0.6, idle=0.05) if r.plan is None or r.plan.name != "hybrid"]
    got, _ = fit_host(a, NODES, without, idle_cores=0.05, saturated_cores=1.95)
    assert got.forward_s is None and got.hop_s == got.message_s


def test_a_cost_the_runs_do_not_measure_keeps_its_base_value_and_none_goes_below_zero(drf):
    a, plans = drf
    plain_only = [r for r in _runs(a, plans, HOST, active=0.5, idle=0.0) if r.plan is None]
    got, _ = fit_host(a, NODES, plain_only, idle_cores=0.0, saturated_cores=2.0)
    assert got.message_s == Profile().message_s and got.task_cpu_s == pytest.approx(HOST.task_cpu_s)
    # runs that cost less than the active share says: the fit pins what would go negative at 0
    cheap = [dataclasses.replace(r, busy_cores=r.busy_cores * (0.2 if r.plan is not None else 1.0))
             for r in _runs(a, plans, HOST, active=0.5, idle=0.0)]
    got, _ = fit_host(a, NODES, cheap, idle_cores=0.0, saturated_cores=2.0)
    assert min(got.message_s, got.arrival_s, got.local_s, got.task_cpu_s) >= 0


def test_a_fit_without_runs_or_a_saturated_host_is_refused(drf):
    a, plans = drf
    with pytest.raises(ValueError, match="at least one measured run"):
        fit_host(a, NODES, [], 0.1, 2.0)
    with pytest.raises(ValueError, match="saturated host must be busier than the idle one"):
        fit_host(a, NODES, _runs(a, plans, HOST, 0.5, 0.1), idle_cores=1.0, saturated_cores=1.0)
    with pytest.raises(ValueError, match="HostRun.busy_cores must be a finite number >= 0, found -1"):
        HostRun(None, 1, 1, -1)


def test_above_its_host_bound_every_plan_carries_its_bound(drf):
    """A decentralized plan's processes serve a backlog newest first (plan.queue), so above the host's bound
    they deliver what they place in time, as a selector's plan does: the throughput is the bound. A selector
    pays for every task offered, placed or not, so its plan's bound falls as the offer grows; a task a
    submitting process never decides costs next to nothing, so the decentralized plan's bound holds."""
    a, plans = drf
    bounds = {}
    for name in ("decentralized+sync 100ms", "centralized"):
        low, high = (estimate_cost(plans[name], a, HOST, NODES, rate=r) for r in (200.0, 900.0))
        assert low.host_bound > 200.0 and high.host_bound < 900.0, name
        assert high.throughput == pytest.approx(high.host_bound), name
        bounds[name] = (low.host_bound, high.host_bound)
    assert bounds["centralized"][1] < bounds["centralized"][0]
    assert bounds["decentralized+sync 100ms"][1] == pytest.approx(bounds["decentralized+sync 100ms"][0])


def test_the_compiler_prices_the_submitting_processes_of_its_trace_on_a_host(drf):
    """Three submitters offered 1:1:3, far above the host's bound: each plan carries its bound, the
    decentralized plan's the highest (no selector's hops on the host), and the compiler chooses it; below
    the bound it carries the offer."""
    from ray_adaptive.compiler import compile_policy
    from ray_adaptive.dsl import load_policy
    from ray_adaptive.experiments.on_ray import RayExperiment, estimate_trace

    exp = RayExperiment(duration_s=0.002, timeout_s=1.0, queue=2)

    def compiled(rate):
        return compile_policy(load_policy("drf_lb"), trace=estimate_trace(rate, NODES, exp, 2), nodes=NODES,
                              executors=2, queue=2, workers=1, replay="deciding", profile=HOST, measure=False)

    high = compiled(2000.0)
    dec, cen = high.estimate("decentralized+sync 100ms"), high.estimate("centralized")
    assert dec.host_bound < 2000.0 and dec.throughput == pytest.approx(dec.host_bound)
    assert dec.throughput > cen.throughput
    assert high.choice.estimate.plan.architecture.value == "decentralized", high.choice.estimate.plan.name
    low = compiled(150.0).estimate("decentralized+sync 100ms")
    assert low.throughput == low.host_bound > 150.0
