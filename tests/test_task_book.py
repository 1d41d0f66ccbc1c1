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
