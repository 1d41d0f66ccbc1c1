"""The selector's preemption, free of Ray (ray_adaptive/runtime/selector_preempt.py): the victim a waiting task
chooses, the grace, the stop asked of the victim's process, OnPreempt exactly once per stopped run, a victim
spared when it finishes in its grace, and the bound on preemptions per task -- hand-worked, on the
reference interpreter's Scheduler, as the selector actor runs it."""

import math

import pytest

from ray_adaptive.dsl import parse_policy
from ray_adaptive.plan import NodeState, Scheduler, TaskState
from ray_adaptive.runtime.selector_preempt import SelectorPreemption

from _builders import counted_preemptive

COUNTED = counted_preemptive()  # (see tests/_builders.py)


def _task(tid, priority, at, preemptible=True, client="c1"):
    return TaskState(tid, at, {"priority": priority}, origin=client, preemptible=preemptible)


@pytest.fixture
def sel():
    """Two nodes of one executor and no queue, both running a low task started at 0; a high task waits."""
    s = Scheduler(parse_policy(COUNTED, name="counted"), [NodeState("a", 0, 1, 0, {}), NodeState("b", 1, 1, 0, {})])
    pre = SelectorPreemption(s)
    for t in (_task("low1", 0, 0.0), _task("low2", 1, 0.0, client="c2")):
        s.add(t, 0.0)
        pre.dispatched(s.decide(0.0), 0.0)
    assert {t.id: t.node for t in s.running.values()} == {"low1": "a", "low2": "b"}
    s.add(_task("high", 10, 1.0, preemptible=False), 1.0)
    assert s.decide(1.0) == []
    return s, pre


def test_the_lowest_priority_is_chosen_stopped_after_its_grace_and_preempted_once(sel):
    s, pre = sel
    [nom] = pre.consider(1.0)
    assert (nom.task.id, nom.victim.id, nom.node, nom.stop_at) == ("high", "low1", "a", 3.0)
    assert nom.score == 0 * 1e6 + 1.0  # victim.priority * 1e6 + (now() - victim.started)
    assert pre.consider(1.5) == []  # (a task waiting for a victim chooses no other)
    assert not pre.ask(2.9) and pre.take_stops("c1") == []  # in its grace
    assert pre.next_due() == 3.0
    assert pre.ask(3.0) and pre.take_stops("c1") == [("low1", 0)] and pre.take_stops("c2") == []
    victim, placed = pre.stopped("low1", 0, 3.2)
    assert (victim.id, victim.node, victim.run, victim.deadline) == ("low1", None, 1, math.inf)
    assert placed.id == "high" and placed.node == "a" and s.running["high"] is placed
    assert [t.id for t in s.queue.tasks()] == ["low1"]  # waits again with its arrival
    assert s.interp.state["holding"] == 2  # 2 dispatched + high - low1's OnPreempt
    assert pre.stopped("low1", 0, 3.3) is None  # the same answer again: OnPreempt ran once
    assert s.interp.state["holding"] == 2
    assert pre.stats()["preemptions"] == 1 and pre.stats()["wasted_s"] == pytest.approx(3.2)
    why = pre.explain_placed("high", None)  # why_placed names the task it displaced
    assert (why["state"], why["node"], why["displaced"], why["displaced_run"]) == ("placed", "a", "low1", 0)
    assert "in the place of low1, which it displaced" in why["why"]
    assert pre.explain_placed("low2", None) is None  # (placed by an ordinary decision: its record says why)
    s.finish("low2", 5.0)  # room: the stopped task runs again (run 1)
    pre.finished("low2")
    [again] = s.decide(5.0)
    assert (again.id, again.node, again.run) == ("low1", "b", 1)
    for tid in ("high", "low1"):
        s.finish(tid, 6.0)
    assert s.interp.state["holding"] == 0 and not s.running and not s.pending


def test_a_victim_that_finishes_in_its_grace_is_spared_and_nothing_is_stopped(sel):
    s, pre = sel
    [nom] = pre.consider(1.0)
    s.finish("low1", 2.0)  # (a cancel that loses the race with the run's finish ends the same way: a finish)
    pre.finished("low1")
    assert pre.by_task == {} and pre.stats()["spared"] == 1
    [placed] = s.decide(2.0)  # the room it freed goes to the waiting task, as any room does
    assert (placed.id, placed.node) == ("high", "a")
    assert not pre.ask(3.0) and pre.stopped("low1", 0, 3.0) is None
    assert s.interp.state["holding"] == 2


def test_a_waiting_task_placed_elsewhere_spares_its_victim(sel):
    s, pre = sel
    pre.consider(1.0)
    s.finish("low2", 2.0)
    pre.finished("low2")
    pre.dispatched(s.decide(2.0), 2.0)  # high goes to b
    assert s.running["high"].node == "b" and pre.by_victim == {}
    assert not pre.ask(3.0) and pre.take_stops("c1") == []


def test_only_preemptible_tasks_under_max_are_victims(sel):
    s, pre = sel
    s.running["low1"].preemptible = False
    s.running["low2"].run = 3  # preempted max (3) times already
    assert pre.consider(1.0) == []
    s.running["low2"].run = 2
    [nom] = pre.consider(2.0)  # (at the next whole second)
    assert nom.victim.id == "low2"


def test_a_stop_not_answered_is_asked_again_then_given_up(sel):
    s, pre = sel
    pre.consider(1.0)
    asked = [t for t in (3.0, 4.0, 5.0, 7.0, 9.0, 11.0) if pre.ask(t) and pre.take_stops("c1")]
    assert asked == [3.0, 5.0, 7.0]  # every RESEND_S, MAX_ASKS times
    assert pre.by_task == {}  # then dropped: the task chooses again at the next pass
