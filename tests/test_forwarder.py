"""The hybrid's forwarding (runtime.placement.Forwarder) against placement actors on the session cluster:
which placements a round calls, when their finish notifications go, and the forwarding hop's slack.

The placements here are stand-in actors that record each call (the real ones are in test_runtime_plans):
what is under test is the selector's side, which decides what each call carries."""

from __future__ import annotations

import threading
import time

import pytest
import ray

from tests.conftest import wait_for
from ray_adaptive.plan.scheduler import TaskState
from ray_adaptive.runtime.placement import Forwarder


@ray.remote(num_cpus=0)
class _Recorder:
    """A placement that places every task it is sent on node "n0", after ``delay`` s, and records each call."""

    def __init__(self, delay: float = 0.0):
        self.delay, self.log = delay, []

    def place(self, forwarded, finished, loads):
        time.sleep(self.delay)
        self.log.append(([t.id for t in forwarded], list(finished), time.monotonic()))
        return [(t.id, "n0") for t in forwarded]

    def calls(self):
        return self.log

    def mark_dead(self, node_id):
        pass


class _Selector:
    """The selector's side of a Forwarder: its lock, and the decisions delivered."""

    def __init__(self, placements, finishes_at_once: bool, fin_lag_s: float = 0.5):
        self.cond, self.delivered = threading.Condition(), []
        self.fwd = Forwarder(placements, self.cond, time.time, lambda ids, now: None, self._deliver, lambda now: None,
                             finishes_at_once=finishes_at_once)
        self.fwd.FIN_LAG_S = fin_lag_s
        self.fwd.start(restarted=False)

    def _deliver(self, client, tid, node, now):
        self.delivered.append(tid)
        return True

    def forward(self, tid: str, deadline: float = float("inf")) -> None:
        with self.cond:
            self.fwd.forward(TaskState(tid, time.time(), {}, "c", deadline=deadline))
            self.cond.notify_all()
        wait_for(lambda: tid in self.delivered, timeout=30, message=f"{tid} placed")

    def finished(self, tid: str) -> float:
        with self.cond:
            self.fwd.finished(tid)
            self.cond.notify_all()
        return time.monotonic()


@pytest.fixture
def placements(ray_cluster):
    actors = [_Recorder.remote(), _Recorder.remote()]
    ray.get([a.calls.remote() for a in actors])
    yield actors
    for a in actors:
        ray.kill(a)


def _calls(actor) -> list:
    return [(tasks, fins) for tasks, fins, _ in ray.get(actor.calls.remote())]


def test_a_finish_rides_with_the_placement_next_call_or_goes_alone_after_the_lag(placements):
    """A placement that keeps no State replica gets a finish with the next tasks sent its way, not in a
    call of its own -- the loads every call carries are exact without it -- and, with none sent its way,
    alone once ``FIN_LAG_S`` has passed, not before. A round calls only placements with work: two
    placements, and every call here carried something."""
    sel = _Selector(placements, finishes_at_once=False, fin_lag_s=1.0)
    try:
        sel.forward("t1")  # to placement 0; the next batch goes to placement 1
        sel.forward("t2")
        sel.finished("t1")
        sel.forward("t3")  # to placement 0: carries t1's finish
        assert _calls(placements[0]) == [(["t1"], []), (["t3"], ["t1"])]
        at = sel.finished("t2")  # placement 1 gets no task now: its finish goes alone, after the lag
        wait_for(lambda: len(_calls(placements[1])) == 2, timeout=30, message="t2's finish sent alone")
        tasks, fins, when = ray.get(placements[1].calls.remote())[1]
        assert (tasks, fins) == ([], ["t2"]) and when - at >= 1.0, (when - at)
        assert sel.fwd.stats()["calls"] == 4 and sel.fwd.stats()["held_rounds"] == 0  # (4 calls, none idle)
    finally:
        sel.fwd.close()


def test_a_placement_keeping_a_state_replica_hears_each_finish_at_once(placements):
    """OnFinish runs on its replica, which the store merges: its finishes are not held back."""
    sel = _Selector(placements, finishes_at_once=True, fin_lag_s=30.0)
    try:
        sel.forward("t1")
        at = sel.finished("t1")
        wait_for(lambda: len(_calls(placements[0])) == 2, timeout=10, message="t1's finish sent at once")
        tasks, fins, when = ray.get(placements[0].calls.remote())[1]
        assert (tasks, fins) == ([], ["t1"]) and when - at < 10
    finally:
        sel.fwd.close()


def test_the_forwarding_hop_is_measured_from_forwarding_to_the_answer(ray_cluster):
    """A placement answering in 0.3 s: the hop's slack is at least that (srtt + 4 rttvar of the samples),
    and the stats show it."""
    slow = _Recorder.remote(0.3)
    sel = _Selector([slow], finishes_at_once=False)
    try:
        assert sel.fwd.slack() == 0.0  # (unmeasured)
        sel.forward("t1")
        sel.forward("t2")
        assert 0.3 <= sel.fwd.slack() < 10 and sel.fwd.stats()["slack_ms"] >= 300
    finally:
        sel.fwd.close()
        ray.kill(slow)


class _Context:
    was_current_actor_reconstructed = False


def test_the_hybrid_selector_drops_a_task_the_hop_would_bring_its_process_too_late(ray_cluster, monkeypatch):
    """The hybrid's selector adds the hop's slack to its process's delivery slack: with a placement that
    answers in 0.3 s, a task with 0.5 s left of a 2 s deadline is dropped at the selector (no slot taken,
    no placement asked) instead of reaching its process after its deadline; one with 1.9 s left is placed."""
    from ray_adaptive.compiler import analyze, enumerate_plans, lower
    from ray_adaptive.dsl import load_policy
    from ray_adaptive.plan import Role, role_specs
    from ray_adaptive.plan.scheduler import NodeState
    from ray_adaptive.runtime.selector import Selector

    slow = _Recorder.options(name="ra-test-slow-placement", namespace="ra-test").remote(0.3)
    ray.get(slow.calls.remote())
    analysis = analyze(load_policy("drf_lb"))
    plan = lower(next(p for p in enumerate_plans(analysis, 1)[0] if p.name == "hybrid"), analysis)
    monkeypatch.setattr(ray, "get_runtime_context", lambda: _Context())  # (the selector runs in this process)
    sel = Selector(role_specs(plan)[Role.SELECTOR], [NodeState("n0", 0, 1, 0, {})],
                   [("ra-test-slow-placement", "ra-test")], 0.0, wait_s=0.0, placement_finishes=False)
    vec = {"tenant": "a", "resource_vec": [0.1, 0.2, 0.1]}

    def decided(tid, tasks=()):
        got = []
        wait_for(lambda: got.extend(sel.exchange("c", list(tasks) if not got and tasks else []).decisions) or got,
                 timeout=30, message=f"{tid} decided")
        return got

    try:
        now = time.time()
        assert decided("t1", [TaskState("t1", now, dict(vec), deadline=now + 60)]) == [("t1", "n0")]
        assert sel.stats()["forward"]["slack_ms"] >= 300
        sel.finished(["t1"])
        now = time.time()
        late = sel.exchange("c", [TaskState("t2", now - 1.5, dict(vec), deadline=now + 0.5)]).decisions
        assert late == [("t2", None)]  # dropped at once, at the selector
        assert [f for f, _, _ in ray.get(slow.calls.remote())] == [["t1"]]  # (the placement never saw t2)
        now = time.time()
        assert decided("t3", [TaskState("t3", now - 0.1, dict(vec), deadline=now + 1.9)]) == [("t3", "n0")]
    finally:
        sel.close()
        ray.kill(slow)
