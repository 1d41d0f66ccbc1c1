"""The adaptive controller, table-driven: when it keeps the plan, when it switches, and why."""

import math

import pytest

from ray_adaptive.control import Controller, EstimateTable, Measurement, PlanEstimate, Settings
from ray_adaptive.control_loop import measure
from ray_adaptive.plan import Plan

C, D, H = "centralized", "decentralized", "hybrid"
PLANS = (Plan(C, C), Plan(D, D), Plan(H, H))
# the paper's shape: centralized saturates at 400/s, hybrid at 470/s, decentralized scales but is unfair above 350/s
LOW, MID, HIGH = 100.0, 460.0, 800.0


def _table(limit=1.2, choice=None) -> EstimateTable:
    def cell(d_ratio):
        return {C: PlanEstimate(400, 1.0, 1.0, 2.5e-3), D: PlanEstimate(2000, d_ratio, d_ratio, 2.0e-3),
                H: PlanEstimate(470, 1.0, 1.05, 4.0e-3)}

    cells = {(0, 0): cell(1.0), (1, 0): cell(1.5), (2, 0): cell(2.1)}
    choice = choice or {(0, 0): C, (1, 0): H, (2, 0): H}
    return EstimateTable("p", limit, 12, 510.0, (LOW, MID, HIGH), (1.0,), PLANS, cells, choice)


def _run(ctl: Controller, rates, every=1.0, start=100.0):
    """Feed one measurement per second; return (time, plan switched to) for each switch."""
    out = []
    for i, r in enumerate(rates):
        v = ctl.evaluate(Measurement(start + i * every, r))
        if v.switch_to:
            out.append((i, v.switch_to.name))
            ctl.switched(v.switch_to.name, start + i * every)
    return out


def test_a_load_the_plan_in_force_carries_keeps_it():
    ctl = Controller(_table(), Settings(consecutive=1, dwell_s=0), C)
    assert _run(ctl, [LOW] * 5) == []
    assert "is the plan in force" in ctl.evaluate(Measurement(200, LOW)).reason


def test_above_the_knee_it_switches_for_goodput_after_k_agreements():
    ctl = Controller(_table(), Settings(consecutive=3, dwell_s=0), C)
    assert _run(ctl, [MID] * 5) == [(2, H)]  # the third agreeing evaluation
    assert ctl.current == H


def test_agreement_is_on_the_rule_so_a_ramp_moving_the_candidate_still_switches():
    # a ramp: the windowed rate rises from MID (the choice: H) to HIGH (the choice: D); every evaluation
    # says "leave C for goodput", so the third one switches -- to the last one's candidate
    t = _table(choice={(0, 0): C, (1, 0): H, (2, 0): D})
    t = EstimateTable("p", t.limit, t.nodes, t.capacity, t.rates, t.burstiness, t.plans,
                      {k: {**v, D: PlanEstimate(2000, 1.0, 1.0, 2.0e-3)} for k, v in t.cells.items()}, t.choice)
    # (agreement on the plan started counting again at HIGH: the switch came one evaluation later, at 3)
    # (D delivers 5x C's goodput at HIGH: with ``urgent`` it would not wait for agreement at all)
    patient = Settings(consecutive=3, dwell_s=0, urgent=math.inf)
    assert _run(Controller(t, patient, C), [MID, HIGH, HIGH, HIGH]) == [(2, D)]
    # an evaluation that keeps the plan (at LOW the plan in force is the choice) starts the count again
    ctl = Controller(t, Settings(consecutive=2, dwell_s=0, urgent=math.inf), C)
    assert _run(ctl, [MID, LOW, MID]) == [] and _to(ctl.evaluate(Measurement(200.0, HIGH))) == D


def test_a_gain_below_the_margin_is_no_reason():
    t = _table()
    ctl = Controller(t, Settings(consecutive=1, dwell_s=0, margin=0.2), C)  # 460 vs 400: +15% < 20%
    v = ctl.evaluate(Measurement(1.0, MID))
    assert v.switch_to is None and "not better enough" in v.reason


def test_a_plan_whose_quality_breaks_the_limit_is_left_whatever_the_goodput():
    ctl = Controller(_table(), Settings(consecutive=1, dwell_s=0), D)  # D delivers more, but is unfair here
    v = ctl.evaluate(Measurement(1.0, HIGH))
    assert v.switch_to is not None and v.switch_to.name == H and v.reason.startswith("quality")


def test_no_switch_within_the_dwell_time():
    ctl = Controller(_table(), Settings(consecutive=1, dwell_s=10.0), C, now=0.0)
    v = ctl.evaluate(Measurement(5.0, MID))
    assert v.switch_to is None and "dwelling" in v.reason
    assert _to(ctl.evaluate(Measurement(11.0, MID))) == H


def test_a_rate_oscillating_around_a_boundary_does_not_flap():
    # every other evaluation on each side of the centralized/hybrid boundary
    ctl = Controller(_table(), Settings(consecutive=3, dwell_s=5.0), C)
    assert _run(ctl, [LOW, MID] * 20) == []
    # without hysteresis the same rates switch back and forth: the test would catch its loss
    eager = Controller(_table(choice={(0, 0): C, (1, 0): H, (2, 0): H}), Settings(consecutive=1, dwell_s=0,
                                                                                 prefer_cheaper=True), C)
    assert len(_run(eager, [LOW, MID] * 20)) > 10


def test_a_cheaper_plan_at_the_same_goodput_is_taken_only_when_asked():
    t = _table(choice={(0, 0): C, (1, 0): H, (2, 0): H})
    assert _to(Controller(t, Settings(consecutive=1, dwell_s=0), H).evaluate(Measurement(1.0, LOW))) == C
    keep = Controller(t, Settings(consecutive=1, dwell_s=0, prefer_cheaper=False), H).evaluate(Measurement(1.0, LOW))
    assert keep.switch_to is None


def test_a_plan_past_its_cliff_is_left_on_the_first_evaluation_that_calls_for_it():
    # a decentralized plan above its host bound: 0 in time at HIGH, against the selector's 400
    d_cliff = {C: PlanEstimate(400, 1.0, 1.0, 2.5e-3), D: PlanEstimate(0.0, 1.0, 1.0, 2.0e-3)}
    d_fine = {C: PlanEstimate(400, 1.0, 1.0, 2.5e-3), D: PlanEstimate(2000, 1.0, 1.0, 2.0e-3)}
    t = EstimateTable("p", 1.2, 12, 510.0, (LOW, HIGH), (1.0,), PLANS[:2], {(0, 0): d_fine, (1, 0): d_cliff},
                      {(0, 0): D, (1, 0): C})
    assert _run(Controller(t, Settings(consecutive=3, dwell_s=0), D), [LOW, HIGH, HIGH]) == [(1, C)]
    v = Controller(t, Settings(consecutive=3, dwell_s=0, urgent=math.inf), D).evaluate(Measurement(1.0, HIGH))
    assert v.switch_to is None and "1 of 3 evaluations agree" in v.reason
    # the dwell still holds
    held = Controller(t, Settings(consecutive=3, dwell_s=10.0), D, now=0.0).evaluate(Measurement(1.0, HIGH))
    assert held.switch_to is None and "dwelling" in held.reason
    # a gain under ``urgent`` (C 400 -> H 470) waits for agreement: see test_above_the_knee_...


def test_periodic_work_counts_in_the_cost_so_a_syncing_plan_is_left_at_low_load():
    # the same per-task latency; D's schedulers keep 0.08 cores busy syncing, C's selector 0.014
    d = PlanEstimate(750, 1.0, 1.0, 2.15e-3, periodic=0.084)
    c = PlanEstimate(460, 1.0, 1.0, 2.15e-3, periodic=0.014)
    assert d.cost_s(150) == pytest.approx(2.15e-3 + 0.084 / 150) and d.cost_s(0) == math.inf
    fast = {C: PlanEstimate(2000, 1.0, 1.0, 2.15e-3, periodic=0.014),  # (both carry 1,000/s: cost alone decides)
            D: PlanEstimate(2000, 1.0, 1.0, 2.15e-3, periodic=0.084)}
    cells = {(0, 0): {C: c, D: d}, (1, 0): fast}
    t = EstimateTable("p", 1.2, 4, 4000.0, (150.0, 1000.0), (1.0,), PLANS[:2], cells, {(0, 0): C, (1, 0): C})
    v = Controller(t, Settings(consecutive=1, dwell_s=0), D).evaluate(Measurement(1.0, 150.0))
    assert _to(v) == C and v.reason.startswith("cheaper: 2.24 vs 2.71 ms")
    assert v.estimates[D]["periodic"] == 0.084
    # at 1,000 tasks/s the syncs are shared by more tasks: 2.16 vs 2.23 ms is within the margin
    v = Controller(t, Settings(consecutive=1, dwell_s=0), D).evaluate(Measurement(1.0, 1000.0))
    assert v.switch_to is None and "not better enough" in v.reason
    # without periodic work the two cost the same: the controller had no reason to leave D
    flat = {(0, 0): {C: PlanEstimate(460, 1.0, 1.0, 2.15e-3), D: PlanEstimate(750, 1.0, 1.0, 2.15e-3)}}
    t0 = EstimateTable("p", 1.2, 4, 4000.0, (150.0,), (1.0,), PLANS[:2], flat, {(0, 0): C})
    assert Controller(t0, Settings(consecutive=1, dwell_s=0), D).evaluate(Measurement(1.0, 150.0)).switch_to is None


def test_a_switch_costing_more_than_it_gains_is_not_made():
    # 460 vs 400 tasks/s for 1 s gains 60 tasks; a 1 s pause at 460/s delays 460
    ctl = Controller(_table(), Settings(consecutive=1, dwell_s=0, horizon_s=1.0, switch_cost_s=1.0), C)
    assert ctl.evaluate(Measurement(1.0, MID)).switch_to is None
    cheap = Controller(_table(), Settings(consecutive=1, dwell_s=0, horizon_s=1.0, switch_cost_s=0.01), C)
    assert _to(cheap.evaluate(Measurement(1.0, MID))) == H


def test_measured_pauses_update_the_switch_cost():
    ctl = Controller(_table(), Settings(switch_cost_s=0.2), C)
    ctl.switched(H, 1.0, pause_s=0.1)
    assert ctl.switch_cost_s == pytest.approx(0.15)


@pytest.mark.parametrize("kw, message", [
    ({"every_s": 0}, "every_s must be a number of seconds > 0, got 0"),
    ({"window_s": math.inf}, "window_s must be a number of seconds > 0, got inf"),
    ({"consecutive": 0}, "consecutive must be an int >= 1, got 0"),
    ({"dwell_s": -1}, "dwell_s must be a number >= 0, got -1"),
    ({"horizon_s": 0}, "horizon_s must be a number of seconds > 0 or None, got 0"),
    ({"urgent": 1.0}, "urgent must be a number > 1 or inf, got 1.0: how many times"),
])
def test_settings_name_the_bad_value(kw, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        Settings(**kw)


def test_the_table_answers_for_the_nearest_rate_in_log_scale():
    t = _table()
    assert t.at(150.0)[1] == C and t.at(300.0)[1] == H and t.at(math.inf)[1] == H and t.at(0.0)[1] == C
    with pytest.raises(KeyError, match="no plan named 'x'"):
        Controller(t, Settings(), "x")


def test_the_cluster_load_is_summed_over_processes_on_their_own_clocks():
    a0 = {"t": 1000.0, "arrivals": 0, "finished": 0, "duration_s": 0.0, "burstiness": 1.0}
    a1 = {"t": 1002.0, "arrivals": 200, "finished": 200, "duration_s": 4.0, "burstiness": 1.0}
    b0 = {"t": 5000.0, "arrivals": 10, "finished": 0, "duration_s": 0.0, "burstiness": 3.0}
    b1 = {"t": 5004.0, "arrivals": 410, "finished": 100, "duration_s": 6.0, "burstiness": 3.0}
    m = measure((1.0, {"a": a0, "b": b0}), (5.0, {"a": a1, "b": b1, "new": a1}))
    assert m.rate == pytest.approx(100 + 100)  # "new" has no earlier report: not counted yet
    assert m.burstiness == pytest.approx(2.0) and m.duration_s == pytest.approx(10.0 / 300)
    assert m.placed is None  # (reports without their groups' counts)
    # the tasks placed: each group's decided count, summed over the groups and the processes
    g = lambda x, y: {"groups": {"x": {"decided": x}, "y": {"decided": y}}}  # noqa: E731
    m = measure((1.0, {"a": a0 | g(0, 0), "b": b0 | g(5, 5)}),
                (5.0, {"a": a1 | g(150, 40), "b": b1 | g(105, 305)}))
    assert m.placed == pytest.approx(190 / 2 + 400 / 4) and m.as_dict()["placed"] == pytest.approx(195.0)


def test_a_plan_in_force_placing_less_than_its_estimate_is_judged_by_what_it_placed():
    # the model gives C 400 tasks/s and H 470 at MID (460 offered): +15% is a reason with margin 0.2 only
    # if C is measured short of its estimate; measured at 300 (< 80% of 400) H gains 53%
    ctl = Controller(_table(), Settings(consecutive=1, dwell_s=0, margin=0.2), C)
    assert ctl.evaluate(Measurement(1.0, MID, placed=390.0)).switch_to is None  # (within the margin: the estimate)
    v = ctl.evaluate(Measurement(2.0, MID, placed=300.0))
    assert _to(v) == H and v.reason.startswith("goodput: 460 vs 300 tasks/s measured (estimated 400)"), v.reason
    assert v.measured["placed"] == 300.0


def _to(verdict):
    """The name of the plan a verdict switches to (None: keep)."""
    return verdict.switch_to.name if verdict.switch_to is not None else None
