"""The selector's delivery clock (runtime.delivery): per process, how long its decisions wait for it."""

from __future__ import annotations

import time

import pytest

from ray_adaptive.runtime.delivery import DeliveryClock


def test_the_slack_follows_each_process_own_delivery_times():
    clock = DeliveryClock()
    for i in range(50):  # a process that takes its mail at once, one that is busy 40 ms each time
        clock.mailed("fast", at=i)
        clock.taken("fast", at=i + 0.001)
        clock.mailed("busy", at=i)
        clock.taken("busy", at=i + 0.04)
    assert clock.slack("fast") == pytest.approx(0.001, abs=1e-4)
    assert clock.slack("busy") == pytest.approx(0.04, abs=1e-3)
    assert clock.slack("never") == 0.0  # (unmeasured: no slack)


def test_a_delivery_is_timed_from_the_first_decision_in_an_empty_mailbox():
    clock = DeliveryClock()
    clock.mailed("c", at=1.0)
    clock.mailed("c", at=1.5)  # (more mail for the same wait)
    clock.taken("c", at=2.0)
    assert clock.slack("c") == pytest.approx(1.0 + 4 * 0.5)  # first sample: srtt 1.0, rttvar 0.5
    clock.taken("c", at=3.0)  # an exchange with no mail measures nothing
    assert clock.slack("c") == pytest.approx(3.0)


def test_a_varying_delivery_time_widens_the_slack_and_a_steady_one_narrows_it():
    clock = DeliveryClock()
    for i, wait in enumerate([0.01, 0.09] * 20):
        clock.mailed("c", at=i)
        clock.taken("c", at=i + wait)
    jittery = clock.slack("c")
    assert jittery > 0.09  # (mean 0.05, deviation 0.04: srtt + 4 rttvar)
    for i in range(40, 100):
        clock.mailed("c", at=i)
        clock.taken("c", at=i + 0.05)
    assert clock.slack("c") == pytest.approx(0.05, abs=0.005) and clock.slack("c") < jittery


def test_a_process_that_left_is_forgotten_and_an_emptied_mailbox_starts_no_wait():
    clock = DeliveryClock()
    clock.mailed("c", at=0.0)
    clock.taken("c", at=0.2)
    clock.forget("c")
    assert clock.slack("c") == 0.0 and clock.stats() == {}
    clock.mailed("d", at=0.0)
    clock.discarded("d")
    clock.taken("d", at=5.0)
    assert clock.slack("d") == 0.0


class _Context:
    was_current_actor_reconstructed = False


@pytest.fixture
def selector(monkeypatch):
    """The centralized DRF-LB plan's selector, in this process (its methods called as its actor would run
    them), on one node with one slot."""
    import ray

    from ray_adaptive.compiler import analyze, enumerate_plans, lower
    from ray_adaptive.dsl import load_policy
    from ray_adaptive.plan import Role, role_specs
    from ray_adaptive.plan.scheduler import NodeState
    from ray_adaptive.runtime.selector import Selector

    monkeypatch.setattr(ray, "get_runtime_context", lambda: _Context())
    analysis = analyze(load_policy("drf_lb"))
    plan = lower(next(p for p in enumerate_plans(analysis, 1)[0] if p.name == "centralized"), analysis)
    sel = Selector(role_specs(plan)[Role.SELECTOR], [NodeState("n0", 0, 1, 0, {})], (), 0.0, wait_s=0.0,
                   lease=False, awaiting_state=False)
    yield sel
    sel.close()


def _task(tid: str, arrival: float, deadline: float):
    from ray_adaptive.plan.scheduler import TaskState

    return TaskState(tid, arrival, {"tenant": "a", "resource_vec": [0.1, 0.2, 0.1]}, deadline=deadline)


def test_the_selector_drops_a_task_its_process_would_get_too_late_and_places_a_fast_one(selector):
    """A decision that waited 0.2 s in the mailbox of a busy process (it was launching, not asking) gives
    that process a slack; a task of it with less time than that left is dropped at the selector, while
    the same task of a process that takes its mail at once is placed."""
    now = time.time()  # (the selector's clock: t0 0)
    first, second = _task("s1", now, now + 60), _task("s2", now, now + 60)
    assert [(t, n) for t, n in selector.exchange("slow", [first]).decisions] == [("s1", "n0")]
    assert selector.exchange("slow", [second]).decisions == []  # (no room: waits)
    selector.finished(["s1"])  # room: s2 decided, mailed while its process is away
    time.sleep(0.2)
    assert [t for t, _ in selector.exchange("slow", []).decisions] == ["s2"]
    slack = selector.stats()["delivery_slack_s"]["slow"]
    assert 0.2 <= slack < 1.5, slack
    selector.finished(["s2"])
    now = time.time()  # 2-s deadlines with 0.15 s left: within the slow process's slack, not the fast one's
    late = selector.exchange("slow", [_task("s3", now - 1.85, now + 0.15)]).decisions
    assert late == [("s3", None)]  # dropped: no room was taken, no hook ran
    assert selector.exchange("fast", [_task("f1", now - 1.85, now + 0.15)]).decisions == [("f1", "n0")]
