"""One scheduler of a plan, free of Ray: a pending queue, a scoring program, State, a view of nodes.

Every role of every plan is this class, hosted where the plan puts it (the
submitting process, the selector actor, a placement actor on a node; see
:mod:`ray_adaptive.runtime.topology`); the simulator's schedulers make
their decisions with its :meth:`Scheduler.pick` too, on the nodes their
load view shows (:mod:`ray_adaptive.sim.plan_sim`):

* the **program** is what it scores with: the whole policy (centralized,
  decentralized), the task part of a separable Score (the hybrid's
  selector, whose only "node" is the pool of all slots), or the node part
  (the hybrid's placement schedulers, which serve forwarded tasks in order);
* the **nodes** are :class:`NodeState` views: a node has room while the
  tasks this scheduler sent there (``own``) plus what the others had there
  at the last heartbeat (``others``) are under ``executors + queue``, and
  ``get_load(node)`` reads that same sum;
* **power-of-d** scores ``d`` random nodes with room per decision instead
  of all of them;
* **State** is this scheduler's copy; with ``merge`` (replicated State) its
  hooks' changes since the last push are what :class:`DeltaLog` tells.

Decisions use the reference interpreter and tie rules (earlier arrival,
then task id, then node order), so a scheduler that sees everything decides
exactly as the ideal scheduler of the simulator -- and with its scoring: a
Score the compiler split into ``T(task) op N(node)`` (``split``) is scored
part by part, each value remembered while what it reads is unchanged
(:class:`~ray_adaptive.plan.scoring.SplitScoring`, bit-for-bit the matrix's),
so a least-loaded decision is a few dictionary look-ups. As there, a task still
pending at its ``deadline`` is dropped, with no hook run: :meth:`Scheduler.decide`
returns it with ``node`` None, and never places it (placed, it would hold a
slot for nothing until its process saw it was late) -- whatever the queue:
no decision is made for a task past its deadline.

A task that makes the policy fail -- a hook that would leave State non-finite
or change a vec's length (see :mod:`ray_adaptive.dsl.values`), a Score that
raises on its row -- fails alone, and State is as if it had never come: its
own submission (:meth:`Scheduler.add`, :meth:`Scheduler.add_and_decide`)
raises the PolicyRuntimeError; a decision :meth:`Scheduler.decide` makes for
it is returned with ``node`` None and ``error`` the message, the other tasks
decided as before. One bad task never stops the queue behind it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from ray_adaptive.dsl.interp import Interpreter
from ray_adaptive.dsl.ir import Policy
from ray_adaptive.dsl.values import undo
from ray_adaptive.errors import PolicyRuntimeError
from ray_adaptive.plan.explain import record
from ray_adaptive.plan.fit import Demand, FitMasks, masked
from ray_adaptive.plan.queue import PendingQueue
from ray_adaptive.plan.replicas import DeltaLog, copy_state
from ray_adaptive.plan.room import has_room, slots_of
from ray_adaptive.plan.scoring import ScoreSplit, group_key, matrix_scores, row_key, scoring_for

__all__ = ["NodeState", "TaskState", "Scheduler", "POOL"]

POOL = "pool"  # the node id of the hybrid selector's single candidate: every slot of the cluster
_log = logging.getLogger(__name__)
_NO_HOOKS = contextlib.nullcontext()  # (stateless: one for every call with no hook to run)


@dataclass(slots=True)
class NodeState:
    """A node as one scheduler sees it (the interpreter's NodeView)."""

    id: str
    index: int
    executors: int
    queue: int
    resources: dict
    fields: dict = field(default_factory=dict)
    own: int = 0  # tasks this scheduler sent here, not finished yet
    others: int = 0  # other schedulers' outstanding tasks here, as of the last heartbeat
    alive: bool = True

    @property
    def load(self) -> int:
        return self.own + self.others

    @property
    def available(self) -> dict:
        return self.resources

    @property
    def has_room(self) -> bool:
        return self.alive and has_room(self.own + self.others, slots_of(self.executors, self.queue))

    def fresh(self) -> "NodeState":
        """This node as a new scheduler first sees it: nothing sent there, nothing heard, alive. (Nodes
        travel between processes as NodeStates; each scheduler keeps its own.)"""
        return NodeState(self.id, self.index, self.executors, self.queue, dict(self.resources), dict(self.fields),
                         alive=self.alive)  # (a node that left before this plan started stays left)

    @property
    def runs_tasks(self) -> bool:
        """Alive, with a slot at all (a node with no CPU gets 0 executors and no queue: see
        :func:`ray_adaptive.api.cluster.policy_nodes`)."""
        return self.alive and slots_of(self.executors, self.queue) > 0

    def as_dict(self) -> dict:
        """What an operator reads of the node (``ray-adaptive status``)."""
        return {"id": self.id, "index": self.index, "executors": self.executors, "queue": self.queue,
                "resources": dict(self.resources), "fields": dict(self.fields)}


@dataclass(slots=True)
class TaskState:
    """A task as schedulers see it (the interpreter's TaskView); plain data, sent between processes."""

    id: str
    arrival: float
    fields: dict
    origin: str = ""  # the submitting process's client id: where the decision goes back to
    node: Optional[str] = None  # the node decided (None from a decision: dropped at its deadline)
    deadline: float = math.inf  # runtime time by which it must be placed, or it is dropped
    error: Optional[str] = None  # why the policy failed on it (a decision returned with node None)
    demand: Demand = ()  # the Ray resources it asks for: only nodes that fit them are candidates (plan.fit)
    preemptible: bool = False  # submitted .options(preemptible=True): a policy's Preempt may stop it
    run: int = 0  # its runs stopped by a preemption so far (the number of its current or next run)

    def export(self) -> dict:
        out = {"id": self.id, "arrival": self.arrival, "fields": dict(self.fields), "origin": self.origin,
               "deadline": None if self.deadline == math.inf else self.deadline, "demand": dict(self.demand)}
        if self.preemptible:
            out.update(preemptible=True, run=self.run)
        return out


class Scheduler:
    """Pending queue + program + State + node view (see the module doc)."""

    def __init__(self, program: Policy, nodes: Sequence[NodeState], *, hooks: bool = True, fifo: bool = False,
                 sample_d: int = 0, merge: Optional[Mapping[str, str]] = None, seed: int = 0, num_nodes: int = 0,
                 split: Optional[ScoreSplit] = None, queue: Optional[PendingQueue] = None, scoring=None,
                 records: int = 0, overflow: bool = False, newest_first: Optional[float] = None):
        """``queue`` / ``scoring``: given by a host that groups and scores tasks its own way (the
        simulator: with the resource fit, group keys cached per task); by default, from ``program``.
        ``records``: how many recent decisions to keep, each with its scores on every candidate
        (see :mod:`ray_adaptive.plan.explain`); 0: none. ``overflow``: with no node having room,
        a task without a deadline is decided among every live node all the same, and waits in
        Ray's queue behind its node's slot (see :mod:`ray_adaptive.plan.holding`). ``newest_first``: a
        backlogged group of tasks with deadlines is served newest first (see :mod:`ray_adaptive.plan.queue`)."""
        self.interp = Interpreter(program, num_nodes=num_nodes or len(nodes))
        self.nodes = list(nodes)
        self.by_id = {n.id: n for n in self.nodes}
        self.hooks = hooks
        self._on_arrival, self._on_dispatch, self._on_finish = (
            self.interp.hook(name) if hooks else None for name in ("OnArrival", "OnDispatch", "OnFinish"))
        self._hooked = any((self._on_arrival, self._on_dispatch, self._on_finish))
        self.fifo = fifo
        self.sample_d = sample_d
        self.overflow = overflow
        self.log = DeltaLog(merge, self.interp.state) if merge else None
        self._rng = random.Random(seed)
        # which nodes each task's Ray resources fit (None: nodes that carry no resources, the simulator's)
        self.fit = FitMasks(self.nodes) if any(n.resources for n in self.nodes) else None
        self.queue = queue if queue is not None else PendingQueue(_with_demand(row_key(program.score)), fifo=fifo,
                                                                  deadlines=True, newest_first=newest_first)
        # (a split part's values are remembered by task group; a Score reading task.id: by task)
        self.scoring = scoring if scoring is not None else scoring_for(program, split, False,
                                                                       group_key(program.score) or (lambda t: t.id))
        self.running: Dict[str, TaskState] = {}  # decided, not finished
        # (task id, time, candidates, j, scores, row) per decision: a DecisionRecord is made when asked for
        self._records: Optional[deque] = deque(maxlen=records) if records > 0 else None
        self.decision_s: deque = deque(maxlen=100_000)  # seconds per decision, the recent ones
        # (task id, message) of the recent hooks that failed outside a decision (OnFinish, a rebuild's
        # OnDispatch): undone, and logged; the task itself went on
        self.hook_errors: deque = deque(maxlen=100)
        # a host's allowance, per task, for its decision's way to the task's process (None: none): a task with
        # less time than that before its deadline is dropped as past it -- placed, it would reach its process
        # after the deadline, not be launched there, and have held a slot for nothing (see runtime.delivery)
        self.slack: Optional[Callable[[TaskState], float]] = None

    @property
    def records(self) -> Optional[List]:
        """The recent decisions as :class:`~ray_adaptive.plan.explain.DecisionRecord` (None: none kept).
        Made when asked: a decision keeps its candidates and scores, not a record of them."""
        if self._records is None:
            return None
        return [record(tid, now, cands, j, [scores.cell(i, k) for k in range(len(cands))])
                for tid, now, cands, j, scores, i in list(self._records)]

    # ---------------------------------------------------------------- hooks
    def _quiet(self):
        """Numpy's errors ignored, as the hooks run (see :meth:`Interpreter.hook`), around one call
        of this scheduler: one ``np.errstate`` per call, none for a policy without hooks."""
        return np.errstate(all="ignore") if self._hooked else _NO_HOOKS

    # ---------------------------------------------------------------- queue
    def add(self, task: TaskState, now: float, arrived: bool = False) -> None:
        """A task joins the pending queue (ordered by arrival then id; or in order received, ``fifo``).
        OnArrival runs unless ``arrived``: its effect is in this State already (a task handed over
        from the plan a live switch replaced, with that plan's State). If OnArrival fails, the
        PolicyRuntimeError goes on, and neither the queue nor State holds the task."""
        if not arrived and self._on_arrival is not None:
            with self._quiet():
                self._on_arrival(task, None, now)
        self.queue.add(task)

    @property
    def pending(self) -> int:
        return len(self.queue)

    def _candidates(self, full: bool = False) -> List[NodeState]:
        """The nodes with room (``full``: every live node; see ``overflow``), power-of-d sampled."""
        room = [n for n in self.nodes if n.runs_tasks] if full else [n for n in self.nodes if n.has_room]
        if self.sample_d and len(room) > self.sample_d:
            picks = sorted(self._rng.sample(range(len(room)), self.sample_d))  # node order kept: the tie rule
            room = [room[i] for i in picks]
        return room

    def pick(self, candidates: Sequence, now: float):
        """The decision step: the first minimum of Score over the queue's rows x ``candidates``
        (the tie rule), taken out of the queue; ``(task, node)``, or None if no pair is feasible.
        The caller binds it (:meth:`decide` does at once; the simulator after the decision's busy
        time, when the node may have filled meanwhile)."""
        if not candidates:
            return None
        rows = self.queue.rows()
        if not rows:
            return None
        scores = self._fitting(self.scoring.scores(self.interp, rows, candidates, now), rows, candidates)
        best = scores.argmin()
        if best is None:
            return None
        i, j = best
        task = rows[i]
        self.queue.take(task, i)
        if self._records is not None:
            self._records.append((task.id, now, candidates, j, scores, i))
        return task, candidates[j]

    def _fitting(self, scores, rows: Sequence, cands: Sequence):
        """``scores`` with the pairs whose task's Ray resources the node cannot hold made infeasible (the
        same object when every row fits every candidate: a cluster of one node kind)."""
        masks = self.fit.row_masks(rows, cands) if self.fit is not None else None
        if masks is None:
            return scores
        return matrix_scores(masked(scores, len(rows), len(cands), masks))

    def decide(self, now: float) -> List[TaskState]:
        """Bind (pending task, node with room) pairs while a feasible one exists; returns the tasks,
        each with ``node`` set (OnDispatch has run for each) -- and those dropped at their
        deadline, with ``node`` None, and those the policy failed on (a Score or OnDispatch
        raised: see the module doc), with ``node`` None and ``error`` set."""
        with self._quiet():
            return self._decide(now)

    def _decide(self, now: float) -> List[TaskState]:
        chosen = []
        start = time.perf_counter()
        self.queue.at(now)
        while self.queue:
            if self.queue.timed:
                late = self.queue.drop_late(now, self.slack)
                chosen += late
                if late:
                    continue
            cands = self._candidates()
            full = not cands and self.overflow
            if full:
                cands = self._candidates(full=True)
            try:
                pick = self.pick(cands, now)
            except PolicyRuntimeError as err:
                chosen.append(self._fail_row(cands, now, err))
                continue
            if pick is None:
                break
            task, node = pick
            slack = self.slack(task) if self.slack is not None else 0.0
            if task.deadline - slack < now:  # (an ungrouped queue scores every task: one past its deadline can win)
                chosen.append(task)  # dropped, node None: a decision is made by the deadline or not at all
                continue
            if full and task.deadline < math.inf:  # it waits for room: its deadline is a placement deadline
                self.queue.add(task)  # (back where it was; its OnArrival has run)
                if self._records is not None:
                    self._records.pop()
                break
            try:
                self._bind(task, node, now)
            except PolicyRuntimeError as err:  # (undone: the task is out of the queue, placed nowhere)
                self._failed(task, err)
            chosen.append(task)
            end = time.perf_counter()
            self.decision_s.append(end - start)
            start = end
        return chosen

    def _bind(self, task: TaskState, node: NodeState, now: float, journal: Optional[list] = None) -> None:
        """Place ``task`` on ``node`` and run its OnDispatch -- or, if that raises, undo both (the
        error goes on). (The caller holds :meth:`_quiet`.)"""
        node.own += 1
        task.node = node.id
        self.running[task.id] = task
        if self._on_dispatch is not None:
            try:
                self._on_dispatch(task, node, now, journal)
            except BaseException:
                self._unbind(task, node)
                raise

    def _unbind(self, task: TaskState, node: NodeState) -> None:
        node.own -= 1
        task.node = None
        del self.running[task.id]

    def _failed(self, task: TaskState, err: PolicyRuntimeError) -> TaskState:
        """``task``, which the policy failed on, as a decision returns it; its decision record dropped."""
        task.node, task.error = None, str(err)
        if self._records and self._records[-1][0] == task.id:
            self._records.pop()
        return task

    def _fail_row(self, cands: Sequence[NodeState], now: float, err: PolicyRuntimeError) -> TaskState:
        """Score raised on the queue's rows: take out of the queue the row it fails on -- the last of
        the shortest prefix of rows that raises (found by bisection: a row may fail alone, or only
        next to another, as vecs of different lengths in one field do) -- and return it failed."""
        rows = self.queue.rows()
        ok, bad = 0, len(rows)  # rows[:ok] score, rows[:bad] raise
        while bad - ok > 1:
            mid = (ok + bad) // 2
            try:
                self.scoring.scores(self.interp, rows[:mid], cands, now)
                ok = mid
            except PolicyRuntimeError as e:
                bad, err = mid, e
        task = rows[bad - 1]
        self.queue.remove(task)
        return self._failed(task, err)

    def add_and_decide(self, task: TaskState, now: float) -> List[TaskState]:
        """:meth:`add` then :meth:`decide`, for a task arriving at an empty queue: scored alone, as the
        queue's only row would be (the same decision), without passing through the queue. If the
        policy fails on it -- OnArrival, Score or OnDispatch -- the PolicyRuntimeError goes on and
        everything it did is undone: State, the queue and the nodes are as before the call."""
        if self.queue:
            self.add(task, now)
            return self.decide(now)
        with self._quiet():
            journal: list = []
            try:
                return self._add_and_decide(task, now, journal)
            except PolicyRuntimeError:
                undo(journal)  # (OnArrival's writes: a failed OnDispatch undid its own, and its placement)
                if self._records and self._records[-1][0] == task.id:
                    self._records.pop()
                raise

    def _add_and_decide(self, task: TaskState, now: float, journal: list) -> List[TaskState]:
        if self._on_arrival is not None:
            self._on_arrival(task, None, now, journal)
        start = time.perf_counter()
        cands = self._candidates()
        if not cands and self.overflow and task.deadline == math.inf:
            cands = self._candidates(full=True)
        if cands:
            scores = self._fitting(self.scoring.scores(self.interp, [task], cands, now), [task], cands)
            best = scores.argmin()
            if best is not None:
                j = best[1]
                if self._records is not None:
                    self._records.append((task.id, now, cands, j, scores, 0))
                self._bind(task, cands[j], now, journal)
                self.decision_s.append(time.perf_counter() - start)
                return [task]
        self.queue.add(task)
        return []

    def finish(self, task_id: str, now: float) -> Optional[TaskState]:
        """A decided task left its node: free its room and run OnFinish. None if unknown."""
        with self._quiet():
            return self._finish(task_id, now)

    def finish_all(self, task_ids: Sequence[str], now: float) -> None:
        """:meth:`finish` for each of ``task_ids`` (one ``np.errstate`` for all their hooks)."""
        with self._quiet():
            for tid in task_ids:
                self._finish(tid, now)

    def _finish(self, task_id: str, now: float) -> Optional[TaskState]:
        task = self.running.pop(task_id, None)
        if task is None:
            return None
        node = self.by_id[task.node]  # type: ignore[index]  # (running: placed)
        node.own -= 1
        if self._on_finish is not None:
            self._hook_outside_decision(self._on_finish, task, node, now)
        return task

    def _hook_outside_decision(self, hook: Callable, task: TaskState, node: NodeState, now: float) -> None:
        """Run a hook of a task that is running whatever the policy says (OnFinish; OnDispatch of an
        adopted task): if it fails, it is undone, logged and kept in :attr:`hook_errors`, and the
        task goes on -- raising would stop the caller's other finishes with it."""
        try:
            hook(task, node, now)
        except PolicyRuntimeError as err:
            self.hook_errors.append((task.id, str(err)))
            _log.warning("policy %s, task %s: %s", self.interp.policy.name, task.id, err)

    def adopt(self, tasks: Sequence[TaskState], dispatch_hooks: bool = False, now: float = 0.0) -> None:
        """Take over running tasks another scheduler decided (``node`` set). No hooks run -- their
        State comes along (a lease's handback) -- unless ``dispatch_hooks``: OnDispatch rebuilds
        their share of State here (a restarted selector, whose State started afresh)."""
        with self._quiet():
            for t in tasks:
                self.running[t.id] = t
                node = self.by_id[t.node]  # type: ignore[index]  # (running: placed)
                node.own += 1
                if dispatch_hooks and self._on_dispatch is not None:
                    self._hook_outside_decision(self._on_dispatch, t, node, now)

    # ------------------------------------------------------- preemption (issue 39; see runtime.preemption)
    def vacate(self, task_id: str, now: float) -> Optional[TaskState]:
        """A running task was stopped by a preemption: free its room, run OnPreempt (OnFinish without one)
        and queue it again with its arrival -- its place and age -- and no OnArrival; it is owed its
        result now, so no deadline drops it. None if it does not run here."""
        task = self.running.pop(task_id, None)
        if task is None:
            return None
        node = self.by_id[task.node]  # type: ignore[index]  # (running: placed)
        node.own -= 1
        if self.hooks:
            hook = self.interp.hook("OnPreempt") or self._on_finish
            if hook is not None:
                with self._quiet():
                    self._hook_outside_decision(hook, task, node, now)
        task.node, task.run, task.deadline = None, task.run + 1, math.inf
        self.queue.add(task)
        return task

    def place(self, task: TaskState, node_id: str, now: float) -> None:
        """Take a pending task out of the queue and bind it to ``node_id`` (OnDispatch), whatever Score
        says: the executor a preemption freed for it. If OnDispatch raises, the task goes back to the
        queue, placed nowhere, and the error goes on."""
        self.queue.remove(task)
        with self._quiet():
            try:
                self._bind(task, self.by_id[node_id], now)
            except PolicyRuntimeError:
                self.queue.add(task)
                raise

    def knows(self, task_id: str) -> bool:
        """Whether the task is pending or running here."""
        return task_id in self.running or task_id in self.queue.ids

    def release_running(self) -> List[TaskState]:
        """Hand every running task over to another scheduler (the inverse of :meth:`adopt`)."""
        out = list(self.running.values())
        for t in out:
            self.by_id[t.node].own -= 1  # type: ignore[index]  # (running: placed)
        self.running.clear()
        return out

    def cancel_pending(self, which: Optional[Callable[[TaskState], bool]] = None) -> List[TaskState]:
        """Remove the pending tasks ``which`` selects (default: all) and return them; no hooks run."""
        return self.queue.remove_where(which or (lambda t: True))

    # ---------------------------------------------------------------- views
    def set_others(self, others: Mapping[str, int]) -> None:
        """Other schedulers' outstanding tasks per node id (a heartbeat's news)."""
        for n in self.nodes:
            n.others = int(others.get(n.id, 0))

    def outstanding(self) -> Dict[str, int]:
        return {n.id: n.own for n in self.nodes}

    def export(self) -> dict:
        """Queues and State, for a plan that replaces this one: nothing queued is lost."""
        return {"pending": [t.export() for t in self.queue.tasks()],
                "running": [{**t.export(), "node": t.node} for t in self.running.values()],
                "state": copy_state(self.interp.state)}


def _with_demand(key: Optional[Callable]) -> Optional[Callable]:
    """A queue's group key that also tells tasks of different Ray resources apart: a group's head stands for
    the tasks behind it, which must fit the same nodes."""
    if key is None:
        return None
    return lambda t: (key(t), t.demand)
