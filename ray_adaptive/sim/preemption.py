"""Preemption in the ideal scheduler: which waiting task displaces which running one, and when.

The reference semantics of ``Preempt(task, victim, node): [grace=S, max=K]``
(docs/language.md, *Preemption*), on the cluster model:

1. **When.** At every decision point, after the ordinary decisions leave
   tasks pending (no feasible pair is left), and -- while tasks wait -- at
   least every :data:`RECHECK_S` seconds (at whole multiples of it), so that
   a condition on the clock (``task.waited >= 5``) takes effect within that.
2. **Who may preempt.** Every pending task that is not already waiting for a
   victim, in the order the policy would serve them if a node had room: its
   best Score over all nodes, ties to the earlier arrival, then the task id.
3. **Who may be a victim.** A running task submitted preemptible, preempted
   fewer than ``max`` times, not already chosen; on a node where Score of
   the waiting task is finite and the waiting task would fit once the victim
   has left. In node order, then start time, then id.
4. **Which.** The waiting task takes the victim with the lowest finite
   ``Preempt(task, victim, node)`` (``inf``: not this one), ties to the
   victim order; on the State of that moment *with the preemptions already
   chosen assumed done* (those still in their grace, and each one chosen
   before it in the same pass: see :func:`nominate`).
5. **Grace.** The victim runs on for ``grace`` seconds. If it finishes
   meanwhile, it finishes (OnFinish) and nothing is stopped; if the waiting
   task is placed elsewhere meanwhile, or dropped, the victim is spared.
   Otherwise, at the end of the grace (a completion at the same instant
   comes first): the victim leaves its node, OnPreempt runs (OnFinish if
   the policy has none), the victim waits again with its arrival (and so
   its place and age) unchanged and OnArrival not run again, and the
   waiting task is dispatched to the victim's executor (OnDispatch), ahead
   of that node's queue.
6. **Bounded.** Each task is preempted at most ``max`` times, so a run has
   at most ``max`` x tasks preemptions whatever Preempt says: a policy cannot
   cycle for ever (the shipped ones cannot cycle at all; see their notes).
   A task that started once is owed its result: a timeout no longer drops
   it once it is waiting again.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from ray_adaptive.dsl.interp import Interpreter
from ray_adaptive.plan.preempting import RECHECK_S, choose, next_recheck
from ray_adaptive.plan.room import has_room
from ray_adaptive.sim.model import Node, Task

__all__ = ["RECHECK_S", "Nomination", "victims", "nominate", "fits_after", "release", "next_recheck"]



class Nomination:
    """A waiting task and the victim it displaces when the victim's grace ends."""

    __slots__ = ("task", "victim", "score", "at")

    def __init__(self, task: Task, victim: Task, score: float, at: float):
        self.task, self.victim, self.score, self.at = task, victim, score, at


def fits_after(node: Node, victim: Task, task: Task) -> bool:
    """Whether ``task`` may take ``victim``'s place on ``node``: the node keeps a slot for it (not drained,
    :mod:`ray_adaptive.sim.membership`) and its resources fit once ``victim`` has left."""
    if not has_room(node.load - 1, node.slots):
        return False
    res, held, freed = node.spec.resources, node._held, victim.spec.resources
    return all(res.get(r, 0.0) - held.get(r, 0.0) + freed.get(r, 0.0) >= amount - 1e-9
               for r, amount in task.spec.resources.items())


def victims(nodes: Sequence[Node], max_preemptions: int) -> list[Task]:
    """The running tasks that may be preempted now (rule 3, without the per-task conditions), in order."""
    out = []
    for node in nodes:
        for t in sorted(node.running, key=lambda x: (x.started_at, x.id)):
            if t.spec.preemptible and t.preemptions < max_preemptions and t.doomed_by is None:
                out.append(t)
    return out


def nominate(interp: Interpreter, pending: Sequence[Task], nodes: Sequence[Node], now: float,
             visible: Optional[Callable[[Task], bool]] = None) -> list[Nomination]:
    """Rules 2-4: the waiting tasks that take a victim now, each with its victim. ``pending`` in (arrival, id)
    order; ``nodes`` every node of the cluster in order; ``visible(task)``: the running tasks the
    scheduler may see (None: all -- the ideal scheduler's and a centralized selector's view; a
    decentralized scheduler sees those it placed). Changes nothing (the caller marks the pairs).

    Preempt reads the State as it will be once the preemptions already chosen have happened -- theirs
    from earlier decision points (still in their grace) and each one chosen in this pass -- as Kubernetes
    counts nominated pods (see :func:`ray_adaptive.plan.preempting.choose`, the rules' one
    implementation, which the selector on Ray runs too)."""
    preempt = interp.policy.preempt
    if preempt is None:
        return []
    waiting = [t for t in pending if t.nominee is None]
    running = victims(nodes, preempt.max_preemptions)
    if visible is not None:
        running = [v for v in running if visible(v)]
    if not waiting or not running:
        return []
    room = {id(v): has_room(v.node.load - 1, v.node.slots) for v in running}  # (not drained)

    def may_take(task: Task, victim: Task) -> bool:
        return fits_after(victim.node, victim, task) if task.spec.resources else room[id(victim)]

    assumed = [(t, t.nominee) for t in pending if t.nominee is not None]
    return [Nomination(task, victim, score, now)
            for task, victim, score in choose(interp, waiting, running, nodes, now, assumed, may_take)]


def release(task: Task) -> None:
    """Undo the nomination ``task`` is part of (as the waiting task or as the victim), if any: it was placed
    elsewhere, dropped, or (a victim) finished within its grace."""
    other = task.nominee or task.doomed_by
    if other is not None:
        other.nominee = other.doomed_by = None
        task.nominee = task.doomed_by = None


def grace_of(interp: Interpreter) -> Optional[float]:
    """The policy's grace in seconds (None: it never preempts)."""
    p = interp.policy.preempt
    return None if p is None else p.grace
