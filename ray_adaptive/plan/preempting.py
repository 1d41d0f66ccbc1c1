"""Choosing victims: rules 2-4 of a policy's ``Preempt`` (docs/language.md, *Preemption*), in one place.

One implementation for every scheduler that preempts: the ideal replay and the plan simulator
(:mod:`ray_adaptive.sim.preemption` gives it the cluster model's tasks and nodes) and the selector on
Ray (:mod:`ray_adaptive.runtime.preemption` gives it its :class:`~ray_adaptive.plan.NodeState` views and
the tasks it dispatched). What each caller supplies is what differs between them: which running tasks
may be victims at all (rule 3's per-task conditions) and whether a waiting task fits once a given victim
has left (``may_take``: the cluster model's held resources, or the selector's room count and the demands
of the tasks it placed).

:func:`choose` takes the waiting tasks in the order the policy would serve them if a node had room (their
best Score over all nodes, then the order given: arrival, id), and gives each the victim with the lowest
finite ``Preempt(task, victim, node)`` among those not taken, on a node where the task's Score is
finite and ``may_take`` holds; ties to the victims' order (node order, then start, then id). Preempt
reads State as it will be once the preemptions already chosen have happened (``assumed``, and each one
chosen before it in the same pass) -- a scratch copy of State on which OnPreempt (OnFinish without one)
of each victim and OnDispatch of its task have run -- as Kubernetes counts nominated pods.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from ray_adaptive.dsl.interp import Interpreter

__all__ = ["RECHECK_S", "choose", "scratch_state", "assume", "leave_hook", "next_recheck"]

#: While tasks wait under a policy that preempts, a scheduler that may preempt decides at least this often
#: (at whole multiples of it), so that a condition on the clock (``task.waited >= 5``) takes effect.
RECHECK_S = 1.0

#: (waiting task, victim) -> whether the task may take the victim's place (its node keeps a slot for it,
#: and its resources fit there once the victim has left)
MayTake = Callable[[Any, Any], bool]


def leave_hook(interp: Interpreter) -> str:
    """The hook a preempted task runs as it leaves its node: OnPreempt, else OnFinish."""
    return "OnPreempt" if interp.policy.hook("OnPreempt") is not None else "OnFinish"


def assume(scratch: Interpreter, task: Any, victim: Any, now: float) -> None:
    """On ``scratch``'s State: ``victim`` left its node (OnPreempt, else OnFinish) and ``task`` took its place
    (OnDispatch). ``victim.node`` is the node's view."""
    node = victim.node
    scratch.run_hook(leave_hook(scratch), victim, node, now)
    scratch.run_hook("OnDispatch", task, node, now)


def scratch_state(interp: Interpreter, assumed: Sequence[Tuple[Any, Any]], now: float) -> Interpreter:
    """An interpreter of the same policy on a copy of ``interp``'s State with the ``assumed`` (task, victim)
    preemptions done (the true State changes only when a victim is stopped)."""
    scratch = Interpreter(interp.policy, interp.num_nodes)
    scratch.state = copy.deepcopy(interp.state)
    for task, victim in assumed:
        assume(scratch, task, victim, now)
    return scratch


def choose(interp: Interpreter, waiting: Sequence[Any], victims: Sequence[Any], nodes: Sequence[Any], now: float,
           assumed: Sequence[Tuple[Any, Any]], may_take: MayTake,
           feasible: Optional[np.ndarray] = None) -> List[Tuple[Any, Any, float]]:
    """Rules 2-4 (see the module doc): ``(task, victim, Preempt value)`` for each waiting task that takes a
    victim now, in the order chosen. ``waiting``: tasks not already waiting for a victim, in (arrival,
    id) order; ``victims``: the running tasks that may be preempted, in (node order, start, id) order,
    each with ``node`` (the view of the node it runs on, one of ``nodes``); ``nodes``: every node of the
    cluster, in order; ``assumed``: the (task, victim) pairs chosen before and still in their grace;
    ``feasible`` (tasks x nodes, optional): pairs the caller knows are impossible whatever Score says
    (a node that left, one the task's resources never fit), as infeasible Score values. Changes nothing."""
    if interp.policy.preempt is None or not waiting or not victims:
        return []
    scratch = scratch_state(interp, assumed, now)
    scores = scratch.score_matrix(waiting, nodes, now)  # (tasks, nodes)
    if feasible is not None:
        scores = np.where(feasible, scores, math.inf)
    order = sorted(range(len(waiting)), key=lambda i: (float(scores[i].min()), i))  # (i: arrival, id order)
    column = {n.id: j for j, n in enumerate(nodes)}
    on_node = np.array([column[v.node.id] for v in victims])
    taken = np.zeros(len(victims), dtype=bool)
    want = scratch.preempt_matrix(waiting, victims, now)  # (tasks, victims), recomputed after each choice
    out: List[Tuple[Any, Any, float]] = []
    for i in order:
        if taken.all():
            break
        task = waiting[i]
        row = want[i].copy()
        row[taken | ~np.isfinite(scores[i, on_node])] = math.inf
        row[[not may_take(task, v) for v in victims]] = math.inf
        j = int(np.argmin(row))
        if row[j] == math.inf:
            continue
        taken[j] = True
        out.append((task, victims[j], float(row[j])))
        assume(scratch, task, victims[j], now)
        want = scratch.preempt_matrix(waiting, victims, now)
    return out


def next_recheck(now: float) -> float:
    """The next whole multiple of :data:`RECHECK_S` after ``now`` (rule 1)."""
    return (math.floor(now / RECHECK_S) + 1) * RECHECK_S
