"""The simulator figures of docs/benchmarks.md (issue 39), recomputed on their scenarios: reclaim's Jain
index against drf_lb's, and the aging bound under a steady high-priority load. The scenarios are in
ray_adaptive/experiments/preemption.py; the numbers follow from the rules, as the comments say."""

import pytest

from ray_adaptive.experiments import preemption as X


@pytest.mark.parametrize("plan", ["ideal", "centralized"])
def test_reclaim_reaches_the_fair_share_within_the_timeout_plus_grace_and_stays_fair(plan):
    """60 s tasks, B at 10 with two rounds of 6: drf_lb gives B nothing until A's first tasks end at 60
    (B's share over the backlog period [10, 120]: (60 x 6) / (110 x 6) = 0.545, Jain 0.829); drf_reclaim
    reclaims 6 executors at 10 + timeout 5 + grace 2 = 17 (Jain 0.989 over [10, 77])."""
    lb, rc = X.reclaim(60.0, 1, "drf_lb", plan), X.reclaim(60.0, 1, "drf_reclaim", plan)
    assert lb["jain"] == pytest.approx(0.8288, abs=1e-3) and lb["reaches_fair_share_after_s"]["B"] == pytest.approx(50.0, abs=0.1)
    assert rc["jain"] >= 0.95 and rc["reaches_fair_share_after_s"]["B"] == pytest.approx(7.0, abs=0.1)
    assert rc["preemptions"] == 6  # B's 6 executors, each taken from A once


def test_aging_bounds_the_low_tasks_wait_under_a_steady_full_high_load():
    """High tasks alone at the execution bound (4/s evenly on 4 nodes), a low task every 10 s on top: each
    low task starts within max_age (10 s) -- with the tier at max_age; Slurm's factor alone lets the high
    tasks, which age too, pass it for over a minute; without aging it waits for the stream's end."""
    aged = X.aging("aging", False, "ideal", 300.0, 1.025)
    assert aged["low_wait_max_s"] <= 10.0 and aged["low_within_max_age"] == aged["low_tasks"] == 29
    assert X.aging("slurm-factor-only", False, "ideal", 300.0, 1.025)["low_wait_max_s"] > 60.0
    assert X.aging("none", False, "ideal", 300.0, 1.025)["low_within_max_age"] <= 1


def test_an_urgent_task_starts_after_the_grace():
    """Two nodes busy with 20 s preemptible tasks; the urgent one at 5 starts at 5 + grace 2 (priority_preemptive)
    instead of at 20 (priority)."""
    assert X.urgent("priority_preemptive", "ideal")["hi_starts_after_s"] == 2.0
    assert X.urgent("priority", "ideal")["hi_starts_after_s"] == 15.0
