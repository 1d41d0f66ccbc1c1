"""A submitting process's book of its tasks: each launched once, or settled without running.

The book holds the tasks from submission until harvested, and runs the
cycle every decision goes through: *claimed* under the router's lock (a
task past its deadline, or already settled, is set aside), *fired* outside
it (submitted to Ray with its node's slot, so deciding and launching
overlap), then counted launched in one lock round; a task never to be
launched (dropped at its deadline, refused by Ray) is *settled* -- its
caller told -- and the room its decision held goes back to the decider, as
a finish would give it. Every method but :meth:`fire` and :meth:`launch`
expects the router's lock held.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from concurrent.futures import InvalidStateError
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ray_adaptive.errors import PlacementDeadlineExceeded, PolicyRuntimeError
from ray_adaptive.monitor import Monitor
from ray_adaptive.plan import TaskState
from ray_adaptive.runtime.deadlines import DeadlineClock
from ray_adaptive.runtime.decider import Decider
from ray_adaptive.runtime.harvest import Harvester
from ray_adaptive.runtime.messages import Stop
from ray_adaptive.runtime.preempt import PREEMPTED, PreemptibleRuns
from ray_adaptive.runtime.routed import LONG_LIVED, RoutedTask, RouterStats
from ray_adaptive.runtime.switch_gate import SwitchGate
from ray_adaptive.workload.specs import TaskSpec

__all__ = ["TaskBook"]


class TaskBook:
    """The tasks submitted and not finished (by id), how many run on each node, and their launch cycle."""

    def __init__(self, policy_name: str, client: str, lock: threading.Condition, decider: Decider,
                 generation: int, harvester: Harvester, gate: SwitchGate, deadlines: DeadlineClock,
                 stats: RouterStats, monitor: Optional[Monitor]):
        self._policy = policy_name
        self._client = client
        self._ids = itertools.count()
        self._lock = lock
        self.decider = decider  # the plan in force's (a live switch replaces it, and the generation)
        self.generation = generation
        self._harvester, self._gate, self._deadlines = harvester, gate, deadlines
        self._stats, self._monitor = stats, monitor
        self.tasks: Dict[str, RoutedTask] = {}
        self.per_node: Dict[str, int] = {}  # launched, not finished
        self.waiters = 0  # callers waiting in Router.call: woken when a task settles
        self.runs: Optional[PreemptibleRuns] = None  # this process's preemptible tasks' runs (made for the first)

    def new_id(self) -> str:
        """A task id unique in the cluster: this process's client id and a sequence number."""
        return f"{self._client}-{next(self._ids):09d}"

    # -- the launch cycle --------------------------------------------------------------------------
    def claim(self, decided: List[TaskState], now: float) -> Tuple[List[RoutedTask], List[RoutedTask], int]:
        """Of the decided tasks, those to launch now and those never to be, and the generation of the plan
        that decided them: -1 while frozen (the replaced plan's last decisions, landing during a switch)."""
        claimed: List[RoutedTask] = []
        gone: List[RoutedTask] = []  # never launched: dropped (deadline), cancelled (close) or refused by Ray
        tasks = self.tasks
        for state in decided:
            task = tasks.get(state.id)
            if task is None:
                continue
            if task.error is None:
                if state.node is None and state.error is not None:  # the policy failed on it (not a deadline)
                    self._stats.failed += 1
                    task.error = PolicyRuntimeError(f"task {task.state.id} of policy {self._policy!r}: {state.error}")
                elif state.node is None:  # the scheduler dropped it at its deadline (before expire did), or
                    early = task.state.deadline - now  # up to its slack before (see runtime.delivery)
                    self.drop(task, "was not placed by then" if early <= 0 else
                              f"was dropped by its scheduler {early:.3f} s before its deadline, as a placement "
                              f"would have reached this process after it")
                elif now > task.state.deadline:  # placed too late (before expire saw it)
                    self.drop(task, f"was placed {now - state.arrival:.3f} s after submission", now - state.arrival)
            if task.error is not None:  # dropped before it costs a launch and a slot
                del tasks[state.id]
                if task.expired:  # the scheduler reached it: no longer in its queue
                    self._deadlines.unreached -= 1
                gone.append(task)
                continue
            task.node, task.dispatched_at = state.node, now
            claimed.append(task)
        return claimed, gone, (-1 if self._gate.frozen else self.generation)

    def launch(self, decided: List[TaskState]) -> None:
        """Claim and fire decided tasks (the lock not held: what a decider's thread hands over)."""
        if not decided:
            return
        with self._lock:
            claimed, gone, plan = self.claim(decided, self.decider.now())
        self.fire(claimed, gone, plan)

    def fire(self, claimed: List[RoutedTask], gone: List[RoutedTask], plan: int) -> None:
        """Launch claimed tasks (outside the lock), then count them launched, in one lock round; settle
        ``gone`` and the launches Ray refused. ``plan``: the generation that decided them (see :meth:`claim`)."""
        launched = []
        now = self.decider.now
        for task in claimed:
            late = now() - task.state.deadline
            if late > 0:  # placed in time, but its turn to launch came after its deadline: not launched,
                # as claim drops one placed too late (a switch's handover or a burst of decisions is launched
                # one task at a time, oldest first; launched, it would hold a slot for nothing)
                with self._lock:
                    self.tasks.pop(task.state.id, None)
                    self.drop(task, f"was placed in time but its launch came {late:.3f} s after its deadline "
                              f"(its process launched the tasks decided before it first)",
                              task.dispatched_at - task.state.arrival, launched_late=True)
                gone.append(task)
                continue
            try:
                if task.state.preemptible:
                    launched.append((task, self._launch_run(task)))
                else:
                    launched.append((task, task.launch(task.node)))  # type: ignore[arg-type]  # (claimed: placed)
            except BaseException as err:  # a bad argument or option: the caller gets the error
                with self._lock:
                    self.tasks.pop(task.state.id, None)
                    task.error = err
                gone.append(task)
        if launched:
            with self._lock:
                per_node, add = self.per_node, self._harvester.add
                for task, ref in launched:
                    task.launched = True
                    if task.state.preemptible:  # (its caller's ref is its resolver's, set by _launch_run)
                        task.run_ref = ref
                    else:
                        task.ref = ref
                    node: str = task.node  # type: ignore[assignment]  # (claimed: placed)
                    per_node[node] = per_node.get(node, 0) + 1
                    add(task, ref)
                self._stats.dispatched += len(launched)
                self._gate.launched(plan, self.generation, time.monotonic())
                if self.waiters:
                    self._lock.notify_all()
            if self._monitor is not None:
                self._monitor.decided([task.state.fields for task, _ in launched])
                long = [(t.state.id, t.state.arrival, t.dispatched_at, t.state.fields) for t, _ in launched
                        if type(t.shape) is tuple and t.shape[:1] == (LONG_LIVED,)]
                if long:  # (actors: recorded while they live, not only at their end)
                    self._monitor.started(self.decider.now(), long)
            for task, ref in launched:
                if task.future is not None:
                    try:
                        task.future.set_result(task.ref)
                    except InvalidStateError:  # (set: a preempted task's next run; told: the router closed)
                        pass
        if gone:
            self.tell(gone)
            placed = [t for t in gone if t.state.node is not None]  # (dropped unplaced: no room held)
            with self._lock:  # their room goes back, as a finish would give it -- held by the gate, with
                # each task's state, when a switch froze it since the decision: the next decider runs
                # OnFinish on the task its predecessor dispatched (its tenant, its node), not on a blank
                chosen = self.finished(placed)
            self.launch(chosen)

    # -- preemptible tasks (issue 39: see runtime.preempt and runtime.selector_preempt) ---------------
    def _launch_run(self, task: RoutedTask) -> Any:
        """Launch the next run of a preemptible task; return its ref. Its caller's ref (``task.ref``) is
        the resolver's, made with the first run. (Outside the lock.)"""
        with self._lock:
            if self.runs is None:
                self.runs = PreemptibleRuns()
            runs = self.runs
        node: str = task.node  # type: ignore[assignment]  # (claimed: placed)
        launch = lambda: task.launch(node)  # noqa: E731
        if task.state.run == 0:
            task.ref = runs.submit(task.state.id, launch)
        else:
            runs.relaunch(task.state.id, launch)
        return runs.current(task.state.id)[1]

    def stop(self, stops: List[Stop]) -> None:
        """Stop these runs, as the policy's scheduler asked (the lock not held): a run that is no longer
        current -- finished, or stopped already -- is left alone (the answer its end gave stands)."""
        todo = []
        with self._lock:
            for tid, run in stops:
                task = self.tasks.get(tid)
                if (task is not None and task.launched and not task.stopping and task.state.preemptible
                        and task.state.run == run and task.error is None):
                    task.stopping = True
                    todo.append(tid)
        for tid in todo:
            self.runs.preempt(tid)  # type: ignore[union-attr]  # (a preemptible task was launched: made)

    def sort_stopped(self, finished: List[RoutedTask]) -> Tuple[List[RoutedTask], List[RoutedTask]]:
        """Of harvested tasks, those that finished (or failed on their own) and those whose run this
        process stopped for a preemption (the lock not held: a stopped run's end is read from Ray). A
        run asked to stop that finished first is a finish: the cancel lost the race."""
        runs = self.runs
        if runs is None:
            return finished, []
        done, stopped = [], []
        for task in finished:
            if not task.state.preemptible:
                done.append(task)
            elif task.stopping and runs.outcome(task.state.id, timeout=0) == PREEMPTED:
                stopped.append(task)
            else:
                runs.forget(task.state.id)
                done.append(task)
        return done, stopped

    def requeue(self, stopped: List[RoutedTask]) -> List[TaskState]:
        """Stopped runs: their tasks are off their nodes and wait to be decided again (the lock held).
        Returns their states, for the decider (:meth:`~ray_adaptive.runtime.decider.Decider.preempted`
        marks each waiting, its next run, no deadline)."""
        for task in stopped:
            self.per_node[task.node] -= 1  # type: ignore[index]  # (launched: placed)
            task.node, task.launched, task.stopping, task.run_ref = None, False, False, None
        if stopped:
            self._stats.preempted += len(stopped)
        return [t.state for t in stopped]

    def close_runs(self) -> None:
        """The router closed: its preemptible tasks' resolver goes (a caller still waiting on one gets an
        actor-died error; the answers given stay)."""
        with self._lock:
            runs, self.runs = self.runs, None
        if runs is not None:
            try:
                runs.close()
            except Exception:
                pass  # (Ray is gone: the resolver went with it)

    def finished(self, tasks: Sequence[RoutedTask]) -> List[TaskState]:
        """Tell the decider these placed tasks left their nodes; frozen, the gate keeps them for the next one."""
        if not tasks:
            return []
        if self._gate.frozen:
            self._gate.hold_finished([t.state for t in tasks])
            return []
        return self.decider.finished([t.state.id for t in tasks])

    def harvested(self, finished: List[RoutedTask], now: float) -> List[TaskState]:
        """Launched tasks finished at ``now``: out of the book and off their nodes. Returns what the room
        they freed lets the decider decide."""
        per_node, tasks = self.per_node, self.tasks
        for task in finished:
            tasks.pop(task.state.id, None)
            per_node[task.node] -= 1  # type: ignore[index]  # (launched: placed)
        self._stats.finished += len(finished)
        return self.finished(finished)

    def recorded(self, finished: List[RoutedTask], now: float) -> None:
        """Tell the monitor (outside the lock) what finished, as it ran."""
        if self._monitor is not None:
            self._monitor.finished(now, [TaskSpec(t.state.id, t.state.arrival, max(now - t.dispatched_at, 0.0),
                                                  fields=t.state.fields) for t in finished])

    def drop(self, task: RoutedTask, when: str, placed_after_s: Optional[float] = None,
             launched_late: bool = False) -> None:
        """Settle a task that missed its deadline (``placed_after_s``: when its placement came -- too late,
        or in time and its launch not: ``launched_late``)."""
        self._stats.dropped += 1
        if launched_late:
            self._stats.dropped_launched_late += 1
        elif placed_after_s is not None:
            self._stats.dropped_placed_late += 1
        if self._monitor is not None:
            self._monitor.dropped(task.state.fields)
        task.error = PlacementDeadlineExceeded(
            f"task {task.state.id} of policy {self._policy!r} {when} (deadline_s "
            f"{task.state.deadline - task.state.arrival:g}); dropped without running", placed_after_s)

    def tell(self, tasks: List[RoutedTask]) -> None:
        """Wake the callers of settled tasks that were not launched (the lock not held)."""
        with self._lock:
            if self.waiters:
                self._lock.notify_all()
        for task in tasks:
            if task.future is None:
                continue
            try:  # (not "if not done(): set": a task this process expired and its scheduler dropped at the
                task.future.set_exception(task.error)  # same time is told by both threads, outside the lock)
            except InvalidStateError:  # told already: the same error, or a preempted task's result
                pass

    def settle(self, which: Callable[[RoutedTask], bool], error: Callable[[RoutedTask], BaseException]
               ) -> List[RoutedTask]:
        """Settle the live tasks ``which`` selects with ``error(task)`` (the router closes or failed); the
        caller tells them next."""
        left = [t for t in self.live() if which(t)]
        for t in left:
            t.error = error(t)
        return left

    def free_unlaunched(self) -> None:
        """At close: tasks decided after their cancel, never launched, give their room back to the decider
        (freeing room may decide more cancelled tasks: those too)."""
        freed: set = set()
        while True:
            ids = [t.state.id for t in self.tasks.values()
                   if t.state.node is not None and not t.launched and t.state.id not in freed]
            if not ids:
                return
            freed.update(ids)
            self.decider.finished(ids)

    # -- what the book holds ------------------------------------------------------------------------
    def get(self, task_id: str) -> Optional[RoutedTask]:
        return self.tasks.get(task_id)

    def running(self) -> bool:
        return any(self.per_node.values())

    def outstanding(self) -> Dict[str, int]:
        """Tasks launched per node, not finished yet."""
        return {n: k for n, k in self.per_node.items() if k}

    def live(self) -> List[RoutedTask]:
        """Tasks not settled by an error (dropped, refused, cancelled)."""
        return [t for t in self.tasks.values() if t.error is None]

    def placed_per_node(self) -> Dict[str, int]:
        """Live tasks decided onto each node (launched or about to be)."""
        out: Dict[str, int] = {}
        for t in self.tasks.values():
            node = t.state.node
            if node is not None and t.error is None:
                out[node] = out.get(node, 0) + 1
        return out

    def oldest_pending(self, now: float, k: int) -> List[Tuple[str, float]]:
        """The ``k`` tasks waiting longest for a decision: ``(task id, seconds waiting)``."""
        waiting = sorted((t.state for t in self.tasks.values() if t.state.node is None and t.error is None),
                         key=lambda s: s.arrival)[:k]
        return [(s.id, round(now - s.arrival, 3)) for s in waiting]

    def demand(self) -> Dict[str, list]:
        """The Ray resources of this process's live tasks: ``held`` (submitted, not launched: the policy holds
        them) and ``running`` (launched, not finished), each ``[[{resource: amount}, count], ...]`` -- what
        the owner asks the autoscaler for (see :mod:`ray_adaptive.runtime.demand`)."""
        held: Counter = Counter()
        running: Counter = Counter()
        for t in self.tasks.values():
            if t.error is None and t.state.demand:
                (running if t.launched else held)[t.state.demand] += 1
        return {"held": [[dict(d), n] for d, n in held.items()], "running": [[dict(d), n] for d, n in running.items()]}

    def tally(self, group_by: Optional[str]) -> Counter:
        """Live tasks per (group -- the value of Task field ``group_by`` --, placed or not)."""
        return Counter((str(t.state.fields.get(group_by, "")) if group_by else "", t.state.node is not None)
                       for t in self.tasks.values() if t.error is None)
