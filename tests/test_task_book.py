"""The submitting process's book of tasks, without Ray: what it does with a decision that came too late.

A scheduler may place a task just before its deadline and the placement reach the submitting process
after it; the task is not launched (its room goes back), and its caller's error says it was placed, and
when -- the figure that tells a backlog served oldest first (decisions spent on tasks too old to use
them) from one never reached (see ``release_tests/scheduler_bound.py``)."""

from __future__ import annotations

import pickle
import threading

import pytest

from ray_adaptive.errors import PlacementDeadlineExceeded
from ray_adaptive.plan.scheduler import TaskState
from ray_adaptive.runtime.deadlines import DeadlineClock
from ray_adaptive.runtime.harvest import Harvester
from ray_adaptive.runtime.membership import NodeMembership
from ray_adaptive.runtime.routed import RoutedTask, RouterStats
from ray_adaptive.runtime.switch_gate import SwitchGate
from ray_adaptive.runtime.task_book import TaskBook


def _book(stats: RouterStats) -> TaskBook:
    lock, deadlines = threading.Condition(), DeadlineClock()
    return TaskBook("p", "c", lock, None, 1, Harvester(lock, stats), SwitchGate(deadlines, NodeMembership()),
                    deadlines, stats, None)


def _submitted(book: TaskBook, tid: str, deadline: float) -> TaskState:
    state = TaskState(tid, arrival=0.0, fields={}, deadline=deadline)
    book.tasks[tid] = RoutedTask(state, launch=lambda node: None)
    return state


def test_a_placement_seen_after_the_deadline_is_not_launched_and_says_when_it_came():
    stats = RouterStats()
    book = _book(stats)
    late, in_time, never = (_submitted(book, tid, deadline=1.0) for tid in ("late", "in_time", "never"))
    late.node, in_time.node = "n1", "n2"  # (never: dropped by its scheduler, node None)
    claimed, gone, _ = book.claim([in_time], now=0.9)
    assert [t.state.id for t in claimed] == ["in_time"] and gone == []
    claimed, gone, _ = book.claim([late, never], now=1.25)
    assert claimed == [] and [t.state.id for t in gone] == ["late", "never"]
    err_late, err_never = gone[0].error, gone[1].error
    assert isinstance(err_late, PlacementDeadlineExceeded) and err_late.placed_after_s == pytest.approx(1.25)
    assert "was placed 1.250 s after submission" in str(err_late)
    assert isinstance(err_never, PlacementDeadlineExceeded) and err_never.placed_after_s is None
    assert (stats.dropped, stats.dropped_placed_late) == (2, 1)
    assert "late" not in book.tasks and "never" not in book.tasks  # (settled: forgotten)


def test_a_task_its_scheduler_dropped_before_the_deadline_says_so():
    """A selector drops a task up to its process's delivery slack early (see runtime.delivery): its
    caller's error says how early, and why, not that the deadline passed."""
    stats = RouterStats()
    book = _book(stats)
    early = _submitted(book, "early", deadline=1.0)  # (node None: dropped by its scheduler)
    _, gone, _ = book.claim([early], now=0.875)
    err = gone[0].error
    assert isinstance(err, PlacementDeadlineExceeded) and err.placed_after_s is None
    assert "dropped by its scheduler 0.125 s before its deadline" in str(err) and "(deadline_s 1)" in str(err)


def test_the_placement_time_survives_pickling():
    err = pickle.loads(pickle.dumps(PlacementDeadlineExceeded("late", placed_after_s=1.5)))
    assert (str(err), err.placed_after_s) == ("late", 1.5)
    assert pickle.loads(pickle.dumps(PlacementDeadlineExceeded("never"))).placed_after_s is None


class _Clock:
    """The decider's side the launch cycle uses: the runtime's clock (advanced by each launch here, as a
    busy process's launches take time) and the room that comes back."""

    def __init__(self) -> None:
        self.t, self.freed = 0.0, []

    def now(self) -> float:
        return self.t

    def finished(self, ids):
        self.freed += ids
        return []


def test_a_task_whose_turn_to_launch_comes_after_its_deadline_is_not_launched_and_its_room_goes_back():
    """A burst decided at once (a switch's handover of a backlog, oldest first) is launched one task at a
    time: a task placed in time whose launch would come after its deadline is dropped, not launched to
    hold a slot for nothing; the others launch."""
    stats = RouterStats()
    book = _book(stats)
    clock = _Clock()
    book.decider = clock
    launches = []

    def launch(node):  # each launch takes 0.3 s of the process's time
        clock.t += 0.3
        launches.append(node)

    states = []
    for tid, deadline in (("a", 1.0), ("b", 0.5), ("c", 2.0)):
        state = TaskState(tid, arrival=0.0, fields={}, deadline=deadline)
        state.node = f"node-{tid}"
        book.tasks[tid] = RoutedTask(state, launch=launch)
        states.append(state)
    claimed, gone, plan = book.claim(states, now=0.2)
    assert [t.state.id for t in claimed] == ["a", "b", "c"] and gone == []
    clock.t = 0.2
    book.fire(claimed, gone, plan)
    # a launched at 0.2 (done 0.5); b's turn came at 0.5 -- its deadline, not after: launched (done 0.8);
    # c's at 0.8, in time. Then a burst where the second's turn comes after its deadline:
    assert launches == ["node-a", "node-b", "node-c"] and clock.freed == []
    late = [TaskState(tid, arrival=1.0, fields={}, deadline=1.5) for tid in ("d", "e")]
    for state in late:
        state.node = f"node-{state.id}"
        book.tasks[state.id] = RoutedTask(state, launch=launch)
    claimed, gone, plan = book.claim(late, now=1.25)
    clock.t = 1.25
    book.fire(claimed, gone, plan)
    assert launches[3:] == ["node-d"] and clock.freed == ["e"]  # e's room went back
    err = claimed[1].error
    assert isinstance(err, PlacementDeadlineExceeded)
    assert "placed in time but its launch came 0.050 s after its deadline" in str(err)
    assert err.placed_after_s == pytest.approx(0.25)  # placed 0.25 s after submission: in time
    assert "e" not in book.tasks and (stats.dropped, stats.dropped_launched_late, stats.dropped_placed_late) == (1, 1, 0)
    assert stats.dispatched == 4


def test_a_placement_dropped_after_a_switch_froze_the_gate_is_held_as_the_task_it_was():
    """A decision made before a freeze, claimed and fired after it with its deadline past (a dispatcher
    thread deciding a backlog at its deadline's edge, issue 37): its room goes back through the gate,
    which must hold the task as dispatched -- its fields and node -- for the next plan's decider to take
    as running, then finished (OnFinish). It held a blank task (no node, no fields), which the next
    decider cannot adopt (``Scheduler.adopt`` looks its node up). Seen on Ray (issue 37): after a switch
    out of a decentralized plan with a backlog, two of three submitting processes had no task decided
    for the rest of the run (JFI 1/3), never acked the next switch, and ``rt.audit()`` found the
    selector's State off (a tenant's allocation -12.1 against 0 implied)."""
    stats = RouterStats()
    book = _book(stats)
    clock = _Clock()
    book.decider = clock
    state = TaskState("t", arrival=0.0, fields={"tenant": "greedy"}, deadline=1.0)
    state.node = "node-1"
    book.tasks["t"] = RoutedTask(state, launch=lambda node: None)
    claimed, gone, plan = book.claim([state], now=0.9)
    book._gate.close(1)  # (a switch froze the gate between the decision and its launch)
    clock.t = 1.1
    book.fire(claimed, gone, plan)
    assert clock.freed == []  # (frozen: no decider is told)
    held = book._gate.held_finished
    assert [(t.id, t.node, t.fields) for t in held] == [("t", "node-1", {"tenant": "greedy"})]


def test_a_task_expired_here_and_dropped_by_its_scheduler_at_once_is_told_once_and_fails_no_thread():
    """The dispatcher's expire settles a task undecided at its deadline and tells its caller outside the
    lock; its scheduler's drop of that task may land at the same time, and claim hands it on to be told
    too (its room must go back). Both tellers saw the future not done, then both set it: the second
    raised InvalidStateError in the dispatcher thread, which stopped the policy's runtime ("the dispatcher
    of policy 'drf_lb' failed ... restart the policy": calibrate_host, centralized at 1,200 tasks/s).
    Here the second teller runs exactly between the first's look and its set."""
    from concurrent.futures import Future

    stats = RouterStats()
    book = _book(stats)
    state = _submitted(book, "t", deadline=1.0)

    class _Interleaved(Future):
        looked = 0

        def done(self):
            was = super().done()
            self.looked += 1
            if self.looked == 1:  # the first teller looked: the second tells now, before the first sets
                book.tell([task])
            return was

    task = book.tasks["t"]
    task.future = _Interleaved()
    book._deadlines.add(1.0, "t")
    with book._lock:
        expired = book._deadlines.expire(1.5, book.tasks, book.drop)  # (the dispatcher's expire)
    _, gone, _ = book.claim([state], now=1.5)  # (its scheduler's drop, node None, landing meanwhile)
    assert [t.state.id for t in expired] == [t.state.id for t in gone] == ["t"]
    book.tell(expired)  # (raised InvalidStateError)
    assert isinstance(task.future.exception(timeout=0), PlacementDeadlineExceeded)
    assert stats.dropped == 1  # (settled once)
