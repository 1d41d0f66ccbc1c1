"""The adaptive controller in the simulator: live switches of a PlanSim, and the runtime's Controller driving them.

Ray-free and fast: the paper's workload on 12 simulated nodes, a few seconds of it. The controller's
estimates are a hand-made table (what the compiler would compute, shaped so that its choice changes
with the rate) except where the CLI is checked.
"""

import functools
import math

import numpy as np
import pytest
from click.testing import CliRunner

from ray_adaptive.control import Controller, EstimateTable, PlanEstimate, Settings
from ray_adaptive.cli import main
from ray_adaptive.compiler import Profile, lower
from ray_adaptive.dsl.interp import Interpreter
from ray_adaptive.experiments import simulate as S
from ray_adaptive.experiments.sweep import plan_space
from ray_adaptive.experiments.workload import Experiment
from ray_adaptive.sim.adaptive import AdaptiveRun, measure_window
from ray_adaptive.sim.plan_sim import PlanSim
from ray_adaptive.sim.timeline import run_epochs
from ray_adaptive.workload.rates import RateProfile

C, D, H = "centralized", "decentralized+sync 100ms", "hybrid"
EXP = Experiment()  # the paper's: drf_lb, three tenants (one greedy), 12 nodes, ~510 tasks/s


@functools.lru_cache(maxsize=None)
def lowered(name: str):
    analysis, space = plan_space("drf_lb", EXP.nodes)
    return lower(space[name], analysis, Profile(), EXP.nodes)


@functools.lru_cache(maxsize=None)
def workload(rate: float, seconds: float):
    return EXP.workload(rate, seconds, seed=0)


def steps(*points) -> RateProfile:
    return RateProfile("steps", points=tuple(points))


def table() -> EstimateTable:
    """Low rates: centralized is the choice; high: hybrid, which carries far more (a goodput switch)."""
    low = {C: PlanEstimate(300.0, 1.0, 1.0, 2e-3), H: PlanEstimate(470.0, 1.0, 1.05, 3e-3)}
    plans = (lowered(C).plan, lowered(H).plan)
    return EstimateTable("drf_lb", 1.2, EXP.nodes, EXP.capacity, (150.0, 450.0), (1.0,), plans,
                         {(0, 0): low, (1, 0): low}, {(0, 0): C, (1, 0): H})


def adaptive_run(rate: RateProfile, seconds: float, settings: Settings, pause_s: float = 0.05):
    sim = PlanSim(lowered(C), EXP.workload(0.0, seconds, seed=0, profile=rate), cr_every=4)
    run = AdaptiveRun(sim, Controller(table(), settings, C), {C: lowered(C), H: lowered(H)}, pause_s)
    epochs = run_epochs(sim, 0.25, on_epoch=run.on_epoch)
    return sim, run, epochs


def count_dispatches(sim) -> dict:
    """Wrap the cluster's dispatch to count each task's dispatches (a task run twice is dispatched twice)."""
    seen: dict = {}
    dispatch = sim.cluster.dispatch

    def counting(task, node):
        seen[task.id] = seen.get(task.id, 0) + 1
        dispatch(task, node)
    sim.cluster.dispatch = counting
    return seen


@pytest.mark.parametrize("before,after", [(C, D), (D, H), (H, C), (C, H)])
def test_a_switch_mid_run_loses_and_duplicates_no_task(before, after):
    sim = PlanSim(lowered(before), workload(600.0, 1.5), prefill=True)  # overloaded: queues, drops, claims in flight
    seen = count_dispatches(sim)
    sim.advance(0.6)
    info = sim.switch(lowered(after), 0.6, pause_s=0.05)
    assert info["undecided"] > 0 and info["on_nodes"] > 0  # (a handover with something to hand over)
    sim.run()
    statuses = [t.status for t in sim.tasks]
    assert set(statuses) <= {"finished", "dropped"}, {s for s in statuses} - {"finished", "dropped"}
    assert sim.unresolved == 0  # each task resolved exactly once (a second resolve would go below 0)
    assert max(seen.values()) == 1  # nobody ran twice
    assert sum(s == "finished" for s in statuses) == sum(1 for t in sim.tasks if t.id in seen)
    assert sim.plan.name == after and sim.result().metrics().goodput > 0


@pytest.mark.parametrize("before,after", [(C, D), (D, H), (H, C), (C, H)])
def test_under_a_load_both_plans_carry_a_switch_drops_nothing(before, after):
    """The tasks handed over are decided by the new plan -- not left to time out."""
    sim = PlanSim(lowered(before), workload(300.0, 1.5))
    sim.advance(0.6)
    info = sim.switch(lowered(after), 0.6, pause_s=0.1)
    sim.run()
    assert info["undecided"] + info["on_nodes"] > 0
    assert [t.id for t in sim.tasks if t.status != "finished"] == []


@pytest.mark.parametrize("before,after", [(C, D), (D, H), (H, C)])
def test_the_state_after_a_switch_is_the_state_rebuilt_from_running_tasks(before, after):
    sim = PlanSim(lowered(before), workload(600.0, 1.5), prefill=True)
    sim.advance(0.7)
    sim.switch(lowered(after), 0.7)
    rebuilt = Interpreter(lowered(before).policy, num_nodes=EXP.nodes)
    for node in sim.nodes:
        for t in (*node.running, *node.waiting):  # (DRF-LB has no OnArrival: undecided tasks add nothing)
            rebuilt.run_hook("OnDispatch", t, node, 0.0)
    holder = sim.servers()[0]  # (the selector, or the first scheduler: each starts from the State handed over)
    got, want = holder.interp.state["alloc"], rebuilt.state["alloc"]
    assert want  # (tasks were running: something to count)
    for tenant in set(got) | set(want):  # (a tenant whose tasks all finished holds zeros in the handed-over one)
        assert np.allclose(np.asarray(got.get(tenant, 0.0)), np.asarray(want.get(tenant, 0.0)), atol=1e-9), tenant


def test_a_switch_pauses_every_scheduler():
    sim = PlanSim(lowered(C), workload(300.0, 1.0))
    sim.advance(0.4)
    sim.switch(lowered(H), 0.4, pause_s=0.2)
    sim.advance(0.6)
    dispatched = [t.dispatched_at for t in sim.tasks if t.dispatched_at is not None]
    assert not [x for x in dispatched if 0.4 < x < 0.6]  # no decision in force during the pause
    sim.advance(0.8)
    assert any(0.6 <= t.dispatched_at <= 0.8 for t in sim.tasks if t.dispatched_at is not None)


def test_switch_names_what_is_wrong():
    sim = PlanSim(lowered(C), workload(300.0, 1.0))
    sim.advance(0.4)
    with pytest.raises(ValueError, match="pause_s must be a number of seconds >= 0, got -1"):
        sim.switch(lowered(H), 0.4, pause_s=-1)
    with pytest.raises(ValueError, match="advance it to 0.9 s first"):
        sim.switch(lowered(H), 0.9)


def test_measure_window_is_the_simulated_arrivals():
    sc = workload(300.0, 2.0)
    tasks = sorted(PlanSim(lowered(C), sc).tasks, key=lambda t: t.arrival)
    m = measure_window(tasks, np.array([t.arrival for t in tasks]), 0.5, 1.5)
    assert m.rate == sum(1 for t in tasks if 0.5 <= t.arrival < 1.5) and 200 < m.rate < 400
    assert 0.5 < m.burstiness < 2.0  # Poisson arrivals: CV² near 1
    assert measure_window(tasks, np.array([t.arrival for t in tasks]), 1.0, 1.0) is None


QUICK = Settings(every_s=0.5, window_s=1.0, consecutive=2, dwell_s=2.0)


def test_the_adaptive_run_switches_when_the_choice_changes():
    sim, run, epochs = adaptive_run(steps((0.0, 150.0), (2.0, 450.0)), 5.0, QUICK)
    assert [(s.from_plan, s.to) for s in run.history] == [(C, H)]
    s = run.history[0]
    assert 2.0 < s.time < 4.0 and s.rate > 300 and s.reason.startswith("goodput")
    assert {e.plan for e in epochs if e.end <= 2.0} == {C} and epochs[-1].plan == H  # the plan in force per epoch


def test_the_adaptive_run_keeps_its_plan_on_a_flat_rate():
    _, run, epochs = adaptive_run(steps((0.0, 150.0)), 5.0, QUICK)
    assert run.history == [] and len(run.evaluations) >= 8
    assert {e.plan for e in epochs} == {C}


def test_hysteresis_holds_on_an_oscillating_rate():
    flapping = steps(*[(t * 0.5, 150.0 if t % 2 == 0 else 450.0) for t in range(16)])  # 150 <-> 450 every 0.5 s
    eager = Settings(every_s=0.5, window_s=0.5, consecutive=1, dwell_s=0.0)
    _, run, _ = adaptive_run(flapping, 8.0, eager)
    assert len(run.history) >= 3  # (the same rate does make a controller without hysteresis flap)
    steady = Settings(every_s=0.5, window_s=0.5, consecutive=3, dwell_s=3.0)
    _, run, _ = adaptive_run(flapping, 8.0, steady)
    assert len(run.history) <= 1


def fake_table(*args, **kwargs):
    return table()


def test_simulate_adaptive_cli(tmp_path, monkeypatch):
    monkeypatch.setattr(S, "estimate_table", fake_table)  # (the compiler's grid takes a while: its own tests)
    out = tmp_path / "sim"
    r = CliRunner().invoke(main, ["simulate", "drf_lb", "--plan", C, "--rates", "steps:0=150,2=450", "--seconds", "3",
                                  "--adaptive", "--switch-pause", "0.05", "--window", "30", "--no-progress",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "adaptive" in r.output and "started with centralized" in r.output
    import pandas as pd

    df = pd.read_csv(out / "timeline.csv")
    assert set(df["plan"]) == {C, "adaptive"} and (df[df.plan == "adaptive"]["in_force"] == C).iloc[0]
    assert (out / "timeline.png").exists()


@pytest.mark.parametrize("args,says", [
    (["--rates", "200,400", "--adaptive"], "--adaptive needs a rate over time"),
    (["--rates", "steps:0=150,2=450", "--switch-pause", "0.1"], "--switch-pause is for --adaptive runs"),
    (["--rates", "steps:0=150,2=450", "--adaptive", "--switch-pause", "-1"], "-1"),
])
def test_simulate_adaptive_cli_errors(args, says, tmp_path):
    r = CliRunner().invoke(main, ["simulate", "drf_lb", "--no-progress", "--out", str(tmp_path), *args])
    assert r.exit_code != 0 and says in r.output, r.output


def test_adaptive_run_checks_its_controller():
    sim = PlanSim(lowered(H), workload(300.0, 1.0))
    with pytest.raises(ValueError, match="the controller's plan in force .'centralized'. is not the simulation's"):
        AdaptiveRun(sim, Controller(table(), QUICK, C), {C: lowered(C)})
    with pytest.raises(ValueError, match="pause_s must be"):
        AdaptiveRun(sim, Controller(table(), QUICK, H), {C: lowered(C)}, pause_s=math.inf)


def test_reproduce_adaptive_cli(tmp_path, monkeypatch):
    monkeypatch.setattr(S, "estimate_table", fake_table)
    out = tmp_path / "rep"
    r = CliRunner().invoke(main, ["reproduce", "--adaptive", "--phase", "1", "--switch-pause", "0.05",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    import pandas as pd

    df = pd.read_csv(out / "adaptive_phases.csv")
    assert set(df["plan"]) == {C, D, H, "adaptive"} and sorted(set(df["phase"])) == [1, 2, 3, 4]
    assert df[["goodput", "jfi", "busy_s_per_1k_run"]].notna().all().all()
    assert "started with centralized" in r.output and (out / "timeline.png").exists()


@pytest.mark.parametrize("args,says", [
    (["--adaptive", "--rates", "200,400"], "--adaptive runs its own phases"),
    (["--phase", "5"], "--phase and --switch-pause are for --adaptive"),
    (["--adaptive", "--ray", "--switch-pause", "0.1"], "measures its switches' pauses"),
    (["--adaptive", "--ray", "--rates", "20,40"], "--adaptive --ray runs its own phases"),
    (["--adaptive", "--nodes", "4"], "--nodes is for --ray"),
])
def test_reproduce_adaptive_cli_errors(args, says, tmp_path):
    r = CliRunner().invoke(main, ["reproduce", "--out", str(tmp_path), *args])
    assert r.exit_code != 0 and says in r.output, r.output
