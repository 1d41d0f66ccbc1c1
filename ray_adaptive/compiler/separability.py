"""Stage 1, second pass: does Score split into a task part and a node part?

:func:`separability` decides whether Score is a monotone combination of a
task-only and a node-only part -- ``f(T(task), N(node))`` with ``f``
non-decreasing in both -- which is what makes the hybrid split (central task
choice by ``T``, per-node placement by ``N``) exact: then
``min over pairs of f = f(min T, min N)``. :func:`score_split` is the
stricter form schedulers score with part by part
(:class:`~ray_adaptive.plan.scoring.SplitScoring`).

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> s = separability(load_policy("drf_lb"))
    >>> s.form, s.task_part, s.node_part
    ('additive', 'max(alloc[task.tenant] / capacity) * 1000', 'get_load(node)')
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from ray_adaptive.compiler.units import JOINT, NODE, NONE, TASK, Unit, direct_side, expr_reads, join_sides, split_units
from ray_adaptive.dsl import ir
from ray_adaptive.dsl.printer import format_expr
from ray_adaptive.plan.scoring import ScoreSplit

__all__ = ["Separability", "separability", "score_split"]


@dataclass(frozen=True)
class Separability:
    """Whether Score = f(T(task), N(node)) with f non-decreasing in both parts.

    ``form``: ``additive`` (T + N, exact), ``product`` (T * N, exact when both
    parts are >= 0: unproven conditions are listed in ``assumptions``),
    ``max``/``min`` (exact), ``task-only`` / ``node-only`` / ``constant``
    (trivially), or ``""`` when not separable. ``task_expr`` / ``node_expr``
    are the parts with locals inlined (closed expressions over the task / the
    node, State and constants); the compiler builds the hybrid's two scoring
    programs from them.
    """

    separable: bool
    form: str
    task_expr: Optional[ir.Expr] = field(default=None, repr=False, compare=False)
    node_expr: Optional[ir.Expr] = field(default=None, repr=False, compare=False)
    assumptions: tuple[str, ...] = ()
    why: str = ""

    @property
    def task_part(self) -> Optional[str]:
        return format_expr(self.task_expr) if self.task_expr is not None else None

    @property
    def node_part(self) -> Optional[str]:
        return format_expr(self.node_expr) if self.node_expr is not None else None

    def as_dict(self) -> dict:
        return {"separable": self.separable, "form": self.form, "task_part": self.task_part,
                "node_part": self.node_part, "assumptions": list(self.assumptions), "why": self.why}


def _inline(e: ir.Expr, env: dict[str, ir.Expr]) -> ir.Expr:
    """``e`` with every local replaced by its defining expression."""
    if isinstance(e, ir.Local):
        return env[e.name]
    if isinstance(e, ir.Index):
        return ir.Index(_inline(e.base, env), _inline(e.key, env), e.type, e.loc)
    if isinstance(e, ir.Unary):
        return ir.Unary(e.op, _inline(e.operand, env), e.type, e.loc)
    if isinstance(e, ir.Binary):
        return ir.Binary(e.op, _inline(e.left, env), _inline(e.right, env), e.type, e.loc)
    if isinstance(e, ir.Call):
        return ir.Call(e.fn, tuple(_inline(a, env) for a in e.args), e.type, e.loc)
    if isinstance(e, ir.Cond):
        return ir.Cond(_inline(e.test, env), _inline(e.then, env), _inline(e.orelse, env), e.type, e.loc)
    if isinstance(e, ir.VecLit):
        return ir.VecLit(tuple(_inline(i, env) for i in e.items), e.type, e.loc)
    return e


def _side(e: ir.Expr) -> str:
    return join_sides(direct_side(a, {}) for a in expr_reads(e))


def _add_terms(e: ir.Expr, sign: int = 1) -> list[tuple[int, ir.Expr]]:
    """Flatten a chain of + and - into signed terms."""
    if isinstance(e, ir.Binary) and e.op in ("+", "-") and e.type.kind != "vec" and e.type != ir.STRING:
        right_sign = sign if e.op == "+" else -sign
        return _add_terms(e.left, sign) + _add_terms(e.right, right_sign)
    if isinstance(e, ir.Unary) and e.op == "-":
        return _add_terms(e.operand, -sign)
    return [(sign, e)]


def _sum(terms: list[tuple[int, ir.Expr]], t: ir.Type) -> Optional[ir.Expr]:
    out: Optional[ir.Expr] = None
    for sign, e in terms:
        if out is None:
            out = e if sign > 0 else ir.Unary("-", e, e.type)
        else:
            out = ir.Binary("+" if sign > 0 else "-", out, e, t)
    return out


def _nonneg(e: ir.Expr) -> bool:
    """Provably >= 0 (a conservative sign analysis)."""
    if isinstance(e, ir.Const):
        return isinstance(e.value, (int, float)) and not isinstance(e.value, bool) and e.value >= 0
    if isinstance(e, ir.Call):
        if e.fn in ("get_load", "num_nodes", "len", "abs", "sqrt"):
            return True
        if e.fn == "max":
            return any(_nonneg(a) for a in e.args)
        if e.fn in ("min", "sum"):
            return all(_nonneg(a) for a in e.args)
        return False
    if isinstance(e, ir.FieldRef):
        return e.obj == "node" and e.name in ("index", "executors", "queue", "load")
    if isinstance(e, ir.Binary) and e.op in ("+", "*", "/"):
        return _nonneg(e.left) and _nonneg(e.right)
    if isinstance(e, ir.VecLit):
        return all(_nonneg(i) for i in e.items)
    return False


def _positive_const(e: ir.Expr) -> bool:
    return isinstance(e, ir.Const) and not isinstance(e.value, bool) and isinstance(e.value, (int, float)) and e.value > 0 and math.isfinite(e.value)


def _literal(e: ir.Expr) -> bool:
    """A number written in the policy (``2``, ``-1``)."""
    return isinstance(e, ir.Const) or (isinstance(e, ir.Unary) and e.op == "-" and isinstance(e.operand, ir.Const))


def _pure(e: ir.Expr) -> bool:
    return _side(e) != JOINT


def _split_product(e: ir.Binary) -> Optional[tuple[ir.Expr, ir.Expr]]:
    """``e`` = (task part) * (node part), constants folded into the task part."""
    factors: list[ir.Expr] = []

    def flatten(x):
        if isinstance(x, ir.Binary) and x.op == "*" and x.type.kind != "vec":
            flatten(x.left)
            flatten(x.right)
        else:
            factors.append(x)

    flatten(e)
    if not all(_pure(f) for f in factors):
        return None
    if any(_literal(f) and not _positive_const(f) for f in factors):
        return None  # a zero or negative constant factor: not non-decreasing
    task = [f for f in factors if _side(f) in (TASK, NONE)]
    node = [f for f in factors if _side(f) == NODE]
    if not task or not node:
        return None

    def prod(fs):
        out = fs[0]
        for f in fs[1:]:
            out = ir.Binary("*", out, f, ir.FLOAT)
        return out

    return prod(task), prod(node)


#: How large the return value may grow once Score's locals are inlined, for the analyses below (which
#: recurse on it): ``b = a + a; c = b + b; ...`` doubles it with each statement, ``a = a + 1`` deepens it.
MAX_INLINED_NODES, MAX_INLINED_DEPTH = 10_000, 200


def _within_bounds(e: ir.Expr) -> bool:
    """Whether ``e`` -- a tree whose shared subtrees count once per use -- stays within the bounds above;
    stops counting at the bound, so its cost is bounded too."""
    stack, count = [(e, 0)], 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_INLINED_NODES or depth > MAX_INLINED_DEPTH:
            return False
        stack.extend((c, depth + 1) for c in ir.children(node))
    return True


_TOO_LARGE = (f"Score's return value, its locals inlined, is over {MAX_INLINED_NODES:,} operations or "
              f"{MAX_INLINED_DEPTH} levels deep: too large to analyze")


def _inlined_return(body: tuple[ir.Stmt, ...]) -> ir.Expr:
    """The return value of a straight-line body with every local replaced by its definition."""
    env: dict[str, ir.Expr] = {}
    ret: Optional[ir.Expr] = None
    for s in body:
        if isinstance(s, ir.Assign):
            value = _inline(s.value, env)
            if s.op is not None:
                value = ir.Binary(s.op, env[s.target.name], value, s.target.type)
            env[s.target.name] = value
        elif isinstance(s, ir.Return):
            ret = _inline(s.value, env)
    assert ret is not None  # the checker guarantees a return on every path
    return ret


def separability(policy: ir.Policy, units: Optional[tuple[Unit, ...]] = None) -> Separability:
    """Is Score ``f(T(task), N(node))`` with ``f`` non-decreasing in T and N? (See :class:`Separability`.)"""
    units = units if units is not None else split_units(policy)
    score_units = [u for u in units if u.function == "Score"]
    side = join_sides(u.side for u in score_units)
    if side == NONE:
        return Separability(True, "constant", why="Score depends on neither the task nor the node")
    if side in (TASK, NODE):
        return Separability(True, f"{side}-only",
                            why=f"Score reads only the {side}: the {'node' if side == TASK else 'task'} part is constant")
    body = policy.score.body
    branching = [u for u in score_units if isinstance(u.stmt, ir.If)]
    if branching:
        u = branching[0]
        return Separability(False, "", why=f"{u.id} (line {u.loc.line}) branches on `{format_expr(u.stmt.test)}`; "
                                           "only straight-line joint Scores are split into a task and a node part")
    ret = _inlined_return(body)
    if not _within_bounds(ret):
        return Separability(False, "", why=_TOO_LARGE)
    joint_text = format_expr(ret)

    terms = _add_terms(ret)
    if all(_pure(t) for _, t in terms):
        task_terms = [(s, t) for s, t in terms if _side(t) in (TASK, NONE)]
        node_terms = [(s, t) for s, t in terms if _side(t) == NODE]
        return Separability(True, "additive", _sum(task_terms, ret.type), _sum(node_terms, ret.type),
                            why="Score = T(task) + N(node): the pair minimising it pairs the best task with the best node")
    if len(terms) == 1 and terms[0][0] > 0:
        e = terms[0][1]
        if isinstance(e, ir.Binary) and e.op == "*":
            split = _split_product(e)
            if split is not None:
                t, n = split
                assumptions = tuple(f"{format_expr(x)} >= 0" for x in (t, n) if not _nonneg(x))
                why = "Score = T(task) * N(node), non-decreasing in both when both are >= 0"
                if assumptions:
                    why += " (not provable from the IR: the compiler checks it on the trace through the competitive ratio)"
                return Separability(True, "product", t, n, assumptions, why)
        if isinstance(e, ir.Call) and e.fn in ("max", "min") and len(e.args) >= 2 and all(_pure(a) for a in e.args):
            t_args = [a for a in e.args if _side(a) in (TASK, NONE)]
            n_args = [a for a in e.args if _side(a) == NODE]

            def combine(xs):
                return xs[0] if len(xs) == 1 else ir.Call(e.fn, tuple(xs), e.type)

            return Separability(True, e.fn, combine(t_args), combine(n_args),
                                why=f"Score = {e.fn}(T(task), N(node)), non-decreasing in both")
    return Separability(False, "", why=f"the return value `{joint_text}` is not a monotone combination "
                                        "(T + N, T * N, max or min) of one task-only and one node-only part")


def score_split(policy: ir.Policy) -> Optional[ScoreSplit]:
    """Score as ``op(T(task), N(node))`` *exactly as the interpreter computes it*, or None.

    Stricter than :func:`separability`: the (locals-inlined) return value
    must itself be one float ``+``, ``*``, ``max`` or ``min`` of a task-side
    and a node-side operand, so combining the separately computed parts
    performs the very operation Score performs (``a + n + b`` is separable,
    but regrouping it as ``(a + b) + n`` could round differently). The
    combination must be non-decreasing in the node part for every task part:
    always for ``+``, ``max``, ``min``; for ``*`` only when the task part is
    provably >= 0. A Score that reads only the task (only the node) splits
    one-sidedly. The simulator's schedulers then decide in O(T + N)
    (:class:`ray_adaptive.plan.scoring.SplitScoring`).
    """
    if any(isinstance(s, ir.If) for s in policy.score.body):
        return None
    ret = _inlined_return(policy.score.body)
    if not _within_bounds(ret):
        return None
    side = _side(ret)
    if side in (TASK, NODE):  # one-sided: nothing to combine, any numeric type
        return ScoreSplit(side, ret, None) if side == TASK else ScoreSplit(side, None, ret)
    if ret.type != ir.FLOAT:
        return None  # int arithmetic wraps at 2**63; the fast path combines floats
    if isinstance(ret, ir.Binary) and ret.op in ("+", "*"):
        op, operands = ret.op, (ret.left, ret.right)
    elif isinstance(ret, ir.Call) and ret.fn in ("max", "min") and len(ret.args) == 2:
        op, operands = ret.fn, ret.args
    else:
        return None
    sides = tuple(_side(x) for x in operands)
    if sides not in ((TASK, NODE), (NODE, TASK)):
        return None
    task, node = operands if sides[0] == TASK else operands[::-1]  # the operations commute
    if op == "*" and not _nonneg(task):
        return None
    return ScoreSplit(op, task, node)
