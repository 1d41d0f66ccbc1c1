"""The selector's side of preemption (issue 39): which waiting task displaces which running one, and when.

A centralized selector (the only plan the compiler keeps for a policy with ``Preempt``; see
docs/compiler.md) has every waiting task and every running one: it placed them all and hears every
finish. :class:`SelectorPreemption` keeps, beside its :class:`~ray_adaptive.plan.Scheduler`, what the
victims' rules read of them and the nominations in their grace, and applies the semantics of the ideal
replay (docs/language.md, *Preemption*; :mod:`ray_adaptive.plan.preempting` is the one implementation
of the choice, shared with :mod:`ray_adaptive.sim.preemption`):

1. **When.** A pass (:meth:`~SelectorPreemption.consider`) after the ordinary decisions, while tasks
   wait, when tasks arrived since the last pass and at every whole second of the runtime's clock (the
   selector's clock thread wakes it). Unlike the ideal scheduler it does not choose again at every
   finish: a finish frees room, which the ordinary decisions use first; a finish that leaves a task
   waiting and changes what Preempt says takes effect at the next whole second.
2.-4. **Who and which**: :func:`~ray_adaptive.plan.preempting.choose`, over the pending tasks not
   waiting for a victim and the running tasks submitted preemptible, preempted fewer than ``max``
   times, not already chosen; a task may take a victim's place on a live node that keeps a slot for
   it once the victim has left and whose resources hold it then (the node's total less the demands of
   the tasks placed there, the victim's given back). ``victim.started`` is when the selector
   dispatched its current run (it does not hear when Ray starts it).
5. **Grace.** At its end (the clock thread), if the victim still runs that run and its task still
   waits here and fits, the stop is asked of the victim's submitting process, in the answer to that
   process's next exchange (:meth:`~SelectorPreemption.take_stops`; again every ``RESEND_S`` until it
   is answered). The process cancels the run and answers :meth:`~SelectorPreemption.stopped` -- or, if
   the run finished first, a finish: a cancel that loses the race is a finish (OnFinish, once). On
   ``stopped(task, run)``: OnPreempt (else OnFinish) runs once -- the run number keys it: a second
   answer for the same run finds the task waiting, not running that run -- the victim waits again
   with its arrival, owed its result (no deadline drops it), and the waiting task takes its place
   on its node (OnDispatch), ahead of every other.
6. **Bounded**: a task is preempted at most ``max`` times (its ``run`` counts them).

Every method expects the selector's lock held.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ray_adaptive.plan import NodeState, Scheduler, TaskState
from ray_adaptive.plan.preempting import choose, next_recheck
from ray_adaptive.plan.room import has_room, slots_of
from ray_adaptive.runtime.messages import Stop

__all__ = ["SelectorPreemption", "Nomination"]


class _Victim:
    """A running task as ``Preempt(task, victim, node)`` reads it (the interpreter's VictimView)."""

    __slots__ = ("task", "node", "started")

    def __init__(self, task: TaskState, node: NodeState, started: float):
        self.task, self.node, self.started = task, node, started

    id = property(lambda self: self.task.id)
    arrival = property(lambda self: self.task.arrival)
    fields = property(lambda self: self.task.fields)
    preemptions = property(lambda self: self.task.run)


@dataclass
class Nomination:
    """A waiting task and the victim it displaces once the victim's grace ends."""

    task: TaskState
    victim: TaskState
    run: int  # the victim's run it stops
    node: str
    score: float  # the Preempt value that chose the victim
    at: float
    stop_at: float  # the end of the grace
    asked_at: Optional[float] = None  # when the stop was (last) asked of the victim's process
    asks: int = 0


class SelectorPreemption:
    """Nominations and the victims' clock of one selector (see the module doc)."""

    RESEND_S = 2.0  # a stop not answered within this is asked again ...
    MAX_ASKS = 3  # ... this many times in all; then the nomination is dropped, and the task chooses again
    DISPLACED_KEPT = 1000  # the recent placements in a victim's place ``why_placed`` can tell (as decision records)

    def __init__(self, sched: Scheduler):
        preempt = sched.interp.policy.preempt
        assert preempt is not None  # (a selector makes one for a policy that preempts)
        self._s = sched
        self.grace = float(preempt.grace or 0.0)
        self.max_preemptions = int(preempt.max_preemptions or 1)
        self.started: Dict[str, float] = {}  # running task -> when its current run was dispatched
        self.by_task: Dict[str, Nomination] = {}  # waiting task id -> its nomination
        self.by_victim: Dict[str, Nomination] = {}  # victim id -> the nomination that chose it
        self.mail: Dict[str, List[Stop]] = {}  # client -> stops to ask in its next answer
        self.preemptions = 0  # runs stopped and their tasks queued again
        self.wasted_s = 0.0  # seconds those runs had run (from their dispatch) when stopped
        self.spared = 0  # nominations undone: the victim finished in its grace, or its task went elsewhere
        self._arrivals = True  # tasks arrived since the last pass
        # task placed in a victim's place -> (the victim, its run stopped, the node, the Preempt value, when)
        self.displaced: "OrderedDict[str, Tuple[str, int, str, float, float]]" = OrderedDict()
        self._next_pass = 0.0

    # ------------------------------------------------------------------ what the selector tells it
    def arrived(self) -> None:
        """Tasks joined the queue: the next :meth:`consider` makes a pass."""
        self._arrivals = True

    def dispatched(self, tasks: List[TaskState], now: float) -> None:
        """The ordinary decisions placed ``tasks``: their runs start now; a waiting task of a nomination
        placed elsewhere spares its victim."""
        for t in tasks:
            self.started[t.id] = now
            nom = self.by_task.get(t.id)
            if nom is not None:
                self._release(nom)

    def finished(self, task_id: str) -> None:
        """A task left its node finished (within its grace, or after a stop it won the race with): a
        nomination that chose it is undone, and its task waits on (it chooses again at the next pass)."""
        self.started.pop(task_id, None)
        nom = self.by_victim.get(task_id) or self.by_task.get(task_id)
        if nom is not None:
            self._release(nom)

    def _release(self, nom: Nomination) -> None:
        self.by_task.pop(nom.task.id, None)
        self.by_victim.pop(nom.victim.id, None)
        self.spared += 1

    # ------------------------------------------------------------------ the rules
    def consider(self, now: float) -> List[Nomination]:
        """Rules 1-4: when tasks arrived since the last pass, or at a whole second, the waiting tasks not
        waiting for a victim choose victims. Returns the new nominations."""
        s = self._s
        if not s.pending or not (self._arrivals or now >= self._next_pass):
            return []
        self._arrivals = False
        self._next_pass = next_recheck(now)
        victims = self._victims(now)
        if not victims:
            return []
        waiting = [t for t in s.queue.tasks() if t.id not in self.by_task]
        if not waiting:
            return []
        held = self._held()
        assumed = [(nom.task, self._view(nom.victim, now)) for nom in self.by_task.values()]
        chosen = choose(s.interp, waiting, victims, s.nodes, now, assumed,
                        lambda task, v: self._may_take(task, v.task, held), self._feasible(waiting))
        out = []
        for task, v, score in chosen:
            nom = Nomination(task, v.task, v.task.run, v.node.id, score, now, now + self.grace)
            self.by_task[task.id] = self.by_victim[v.task.id] = nom
            out.append(nom)
        return out

    def _view(self, task: TaskState, now: float) -> _Victim:
        return _Victim(task, self._s.by_id[task.node], self.started.setdefault(task.id, now))  # type: ignore[index]

    def _victims(self, now: float) -> List[_Victim]:
        """Rule 3 without the per-task conditions: running, preemptible, preempted fewer than ``max``
        times, not chosen already, on a live node; in node order, then start, then id."""
        s = self._s
        out = [self._view(t, now) for t in s.running.values()
               if t.preemptible and t.run < self.max_preemptions and t.id not in self.by_victim
               and s.by_id[t.node].alive]  # type: ignore[index]  # (running: placed)
        out.sort(key=lambda v: (v.node.index, v.started, v.id))
        return out

    def _held(self) -> Dict[str, Dict[str, float]]:
        """Node id -> the resources the tasks placed there ask for (what Ray holds for them)."""
        held: Dict[str, Dict[str, float]] = {}
        for t in self._s.running.values():
            if t.demand:
                h = held.setdefault(t.node, {})  # type: ignore[arg-type]  # (running: placed)
                for r, amount in t.demand:
                    h[r] = h.get(r, 0.0) + amount
        return held

    def _may_take(self, task: TaskState, victim: TaskState, held: Dict[str, Dict[str, float]]) -> bool:
        """Whether ``task`` may take ``victim``'s place: its node is alive, keeps a slot for it once the
        victim has left, and holds its resources then."""
        node = self._s.by_id[victim.node]  # type: ignore[index]  # (running: placed)
        if not node.alive or not has_room(node.load - 1, slots_of(node.executors, node.queue)):
            return False
        if not task.demand:
            return True
        h, freed = held.get(node.id, {}), dict(victim.demand)
        return all(node.resources.get(r, 0.0) - h.get(r, 0.0) + freed.get(r, 0.0) >= amount - 1e-9
                   for r, amount in task.demand)

    def _feasible(self, waiting: List[TaskState]) -> Optional[np.ndarray]:
        """(tasks x nodes) False where a task can never run (a node that left, one its resources never
        fit); None when every pair can."""
        s = self._s
        alive = np.array([n.alive for n in s.nodes], dtype=bool)
        masks = [s.fit.of(t.demand) if s.fit is not None else None for t in waiting]
        if alive.all() and all(m is None for m in masks):
            return None
        out = np.tile(alive, (len(waiting), 1))
        for i, m in enumerate(masks):
            if m is not None:
                out[i] &= m
        return out

    # ------------------------------------------------------------------ the grace, and the stop
    def ask(self, now: float) -> bool:
        """Rule 5 at the end of each grace: the stops due now go to their processes' mail (and those not
        answered within RESEND_S again). A nomination whose victim no longer runs that run, whose task
        no longer waits here, or whose task no longer fits there, is undone. True if any stop was asked."""
        s, asked = self._s, False
        held: Optional[Dict[str, Dict[str, float]]] = None
        for nom in list(self.by_victim.values()):
            if nom.asked_at is None and now < nom.stop_at or nom.asked_at is not None and now < nom.asked_at + self.RESEND_S:
                continue
            victim = s.running.get(nom.victim.id)
            if victim is not nom.victim or victim.run != nom.run or nom.task.id not in s.queue.ids:
                self._release(nom)
                continue
            if nom.asked_at is None:
                held = held if held is not None else self._held()
                if not self._may_take(nom.task, victim, held):
                    self._release(nom)
                    continue
            elif nom.asks >= self.MAX_ASKS:  # (its process never answered: gone, or the answers lost)
                self._release(nom)
                continue
            nom.asked_at, nom.asks = now, nom.asks + 1
            self.mail.setdefault(victim.origin, []).append((victim.id, victim.run))
            asked = True
        return asked

    def take_stops(self, client: str) -> List[Stop]:
        """The stops to ask of ``client`` in this answer (taken out of the mail)."""
        return self.mail.pop(client, []) if self.mail else []

    def stopped(self, task_id: str, run: int, now: float) -> Optional[Tuple[TaskState, Optional[TaskState]]]:
        """``client`` stopped run ``run`` of ``task_id``: it leaves its node (OnPreempt, else OnFinish) and
        waits again; the task that chose it takes its place (OnDispatch). Returns (the victim, the task
        placed on its node or None) -- or None if ``task_id`` does not run that run here (an answer
        already applied: OnPreempt runs once per run)."""
        s = self._s
        victim = s.running.get(task_id)
        if victim is None or victim.run != run:
            return None
        nom = self.by_victim.pop(task_id, None)
        if nom is not None:
            self.by_task.pop(nom.task.id, None)
        node = victim.node
        held = self._held() if nom is not None else {}
        fits = nom is not None and nom.task.id in s.queue.ids and self._may_take(nom.task, victim, held)
        s.vacate(task_id, now)
        self.preemptions += 1
        self.wasted_s += max(0.0, now - self.started.pop(task_id, now))
        self._arrivals = True  # (it waits again: a pass may find it a place, or let it choose)
        if not fits or nom is None:
            return victim, None
        try:
            s.place(nom.task, node, now)  # type: ignore[arg-type]  # (running: placed)
        except Exception:  # (its OnDispatch failed: it waits on, and an ordinary decision fails it)
            return victim, None
        self.started[nom.task.id] = now
        self.displaced[nom.task.id] = (victim.id, run, node, nom.score, now)  # type: ignore[assignment]
        while len(self.displaced) > self.DISPLACED_KEPT:
            self.displaced.popitem(last=False)
        return victim, nom.task

    # ------------------------------------------------------------------ the clock, and what an operator sees
    def next_due(self) -> float:
        """When the selector's clock thread must act next: a grace's end, a stop to ask again, or the
        next whole second while tasks wait for no victim and a running task may be one (inf: none)."""
        due = [nom.stop_at if nom.asked_at is None else nom.asked_at + self.RESEND_S for nom in self.by_victim.values()]
        s = self._s
        if s.pending > len(self.by_task) and any(t.preemptible and t.run < self.max_preemptions
                                                 for t in s.running.values()):
            due.append(self._next_pass)
        return min(due, default=math.inf)

    def explain(self, task_id: str) -> Optional[dict]:
        """A waiting task's nomination, as ``why_pending`` adds it (None: it has none)."""
        nom = self.by_task.get(task_id)
        if nom is None:
            return None
        when = ("its grace ended; the stop was asked of its process" if nom.asked_at is not None
                else f"its grace ends at {nom.stop_at:.3f} s")
        return {"victim": nom.victim.id, "victim_node": nom.node, "preempt_score": nom.score,
                "grace_ends_at": round(nom.stop_at, 6), "stop_asked": nom.asked_at is not None,
                "preempting": f"it displaces {nom.victim.id} on node {nom.node[:12]} (Preempt {nom.score:g}); {when}"}

    def explain_placed(self, task_id: str, record: Optional[dict]) -> Optional[dict]:
        """Why a task was placed where it runs, if it took a victim's place (else ``record``, the decision
        record of its ordinary placement, unchanged): the task it displaced, that task's run stopped, the
        node and the Preempt value -- unless ``record`` is newer (a later run placed by an ordinary decision)."""
        got = self.displaced.get(task_id)
        if got is None or record is not None and record.get("time", -math.inf) > got[4]:
            return record
        victim, run, node, score, at = got
        return {"state": "placed", "node": node, "time": at, "displaced": victim, "displaced_run": run,
                "preempt_score": score,
                "why": f"placed on {node[:12]} in the place of {victim}, which it displaced (Preempt {score:g}): "
                       f"run {run} of {victim} was stopped after its grace, and {victim} waited again"}

    def stats(self) -> Dict[str, Any]:
        return {"preemptions": self.preemptions, "wasted_s": round(self.wasted_s, 6), "nominated": len(self.by_task),
                "spared": self.spared}
