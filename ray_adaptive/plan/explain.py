"""Why a task is still pending, and why it landed where it did -- in words a user understands.

A scheduler keeps a bounded ring of :class:`DecisionRecord` (its size set by
the runtime; 0: none): for each decision, the task, the node chosen, its
score there and its score on every other candidate node at that moment.
:func:`explain_pending` looks at a task still in a scheduler's queue:

* no node has room (which nodes, how full);
* infeasible on every node with room: Score is ``inf`` (or NaN) there, and
  which ``return`` of the policy said so, with FILE:LINE (:func:`trace_score`);
* ranked behind other tasks: its best score and the scores that win;
* past its deadline (it is dropped at the next decision).

Example:
    >>> from ray_adaptive.dsl import parse_policy
    >>> from ray_adaptive.dsl.interp import Interpreter
    >>> from ray_adaptive.plan.scheduler import NodeState, TaskState
    >>> p = parse_policy("Task:\\n  zone: string\\nNode:\\n  zone: string\\n"
    ...                  "Score(task, node):\\n  if task.zone != node.zone:\\n    return inf\\n  return 1", file="z.policy")
    >>> value, loc = trace_score(Interpreter(p), p.score, TaskState("t", 0.0, {"zone": "a"}),
    ...                          NodeState("n0", 0, 1, 0, {}, {"zone": "b"}), 0.0)
    >>> value, str(loc)
    (inf, 'z.policy:7:5')
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from ray_adaptive.dsl import ir
from ray_adaptive.plan.room import slots_of

__all__ = ["DecisionRecord", "record", "explain_pending", "explain_placed", "trace_score"]

_VALUE = "__explain__"


@dataclass(frozen=True)
class DecisionRecord:
    """One decision: ``task`` bound to ``node`` with ``score`` at ``time``; ``scores``: every candidate's."""

    task: str
    time: float
    node: str
    score: float
    scores: Tuple[Tuple[str, float], ...] = field(repr=False)

    def runner_up(self) -> Optional[Tuple[str, float]]:
        """The best other candidate node and its score (None if there was no other)."""
        others = [(s, n) for n, s in self.scores if n != self.node]
        if not others:
            return None
        s, n = min(others, key=lambda x: (x[0] if x[0] == x[0] else math.inf))
        return n, s


def record(task_id: str, now: float, cands: Sequence, j: int, row_scores: Sequence[float]) -> DecisionRecord:
    """A record of choosing ``cands[j]`` with ``row_scores`` (the task's score on each candidate)."""
    return DecisionRecord(task_id, now, cands[j].id, float(row_scores[j]),
                          tuple((c.id, float(s)) for c, s in zip(cands, row_scores)))


def trace_score(interp, score: ir.Function, task, node, now: float) -> Tuple[float, ir.Loc]:
    """Score of one (task, node) pair, and the location of the ``return`` that gave it: the policy's
    statements run one at a time, each branch taken as the interpreter takes it."""
    local_values: Dict[str, object] = {}

    def value(expr: ir.Expr):
        run = interp.statements([ir.Assign(ir.Local(_VALUE, expr.type), expr)])
        out = run([task], [node], now, local_values)[_VALUE]
        return out.item() if hasattr(out, "item") else out

    def block(stmts) -> Optional[Tuple[float, ir.Loc]]:
        for st in stmts:
            if isinstance(st, ir.Return):
                return float(value(st.value)), st.loc
            if isinstance(st, ir.If):
                found = block(st.body if bool(value(st.test)) else st.orelse)
                if found is not None:
                    return found
            elif isinstance(st, ir.Assign):
                local_values.update(interp.statements([st])([task], [node], now, local_values))
        return None

    found = block(score.body)
    if found is None:  # (the checker requires a return on every path)
        raise AssertionError("Score ended without a return")
    return found


def _room(n) -> str:
    state = "dead" if not n.alive else f"{n.load} of {slots_of(n.executors, n.queue)} slots taken"
    return f"{n.id[:12]} ({state})"


def explain_placed(records: Sequence[DecisionRecord], task_id: str) -> Optional[dict]:
    """The decision record of ``task_id`` (None: not in the ring: too old, or never decided here)."""
    for r in reversed(records):
        if r.task == task_id:
            up = r.runner_up()
            return {"state": "placed", "node": r.node, "score": r.score, "time": r.time,
                    "scores": dict(r.scores), "runner_up": {"node": up[0], "score": up[1]} if up else None,
                    "why": (f"placed on {r.node[:12]} with score {r.score:g}" +
                            (f"; the runner-up was {up[0][:12]} with {up[1]:g}" if up else "; it was the only candidate"))}
    return None


def explain_pending(sched, task_id: str, now: float) -> Optional[dict]:
    """Why ``task_id``, pending in ``sched`` (a :class:`~ray_adaptive.plan.Scheduler`), is not placed yet
    (None if it is not pending there). Tasks are ranked as the scheduler ranks them, over every live
    node: the first in line is placed in the next slot that frees."""
    pending = [t for t in sched.queue.tasks() if t.id == task_id]
    if not pending:
        return None
    task = pending[0]
    out = {"state": "pending", "task": task_id, "waiting_s": round(now - task.arrival, 3)}
    if task.deadline < now:
        return {**out, "reason": "deadline", "why": "past its deadline: dropped at the next decision, never run"}
    nodes = [n for n in sched.nodes if n.alive]
    if not nodes:
        return {**out, "reason": "no-room", "why": "every node it could run on is dead"}
    row = sched.scoring.scores(sched.interp, [task], nodes, now)
    mine = [row.cell(0, j) for j in range(len(nodes))]
    if all(not (s < math.inf) for s in mine):
        where: Dict[str, List[str]] = {}
        for n in nodes:
            value, loc = trace_score(sched.interp, sched.interp.policy.score, task, n, now)
            where.setdefault(f"{loc} (return {value:g})", []).append(n.id[:12])
        said = "; ".join(f"{loc} on {', '.join(ids)}" for loc, ids in where.items())
        return {**out, "reason": "infeasible", "returns": where,
                "why": f"infeasible on every node: Score is inf there, by {said}"}
    best = min(s for s in mine if s == s)
    node = nodes[mine.index(best)].id
    rows = sched.queue.rows()
    minima = sched.scoring.scores(sched.interp, rows, nodes, now).row_min()
    own = sched.queue.row_of(task, rows)
    key = (rows[own].arrival, rows[own].id) if own is not None else (task.arrival, task.id)
    ahead = [(m, sched.queue.count(r)) for i, (r, m) in enumerate(zip(rows, minima))
             if i != own and (m < best or (m == best and (r.arrival, r.id) < key))]
    before = sched.queue.position(task)  # its own group's tasks ahead of it: they score the same
    if before:
        ahead.append((best, before))
    count = sum(k for _, k in ahead)
    full = [n for n in nodes if not n.has_room]
    room = "no node has room: " + ", ".join(_room(n) for n in full) if len(full) == len(nodes) else \
        f"{len(nodes) - len(full)} node(s) have room"
    facts = {"best_score": best, "best_node": node, "ahead": count}
    if ahead:
        winning = sorted(m for m, _ in ahead)[:3]
        return {**out, **facts, "reason": "ranked", "winning_scores": winning,
                "why": f"ranked behind {count} other task(s): its best score is {best:g} (on {node[:12]}), the "
                       f"winning scores {', '.join(f'{w:g}' for w in winning)}; {room}"}
    if len(full) == len(nodes):
        return {**out, **facts, "reason": "no-room", "why": f"{room}; it is first in line (score {best:g})"}
    return {**out, **facts, "reason": "next", "why": f"first in line (score {best:g} on {node[:12]}): placed at the "
                                                       f"next decision"}
