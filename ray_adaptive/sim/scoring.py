"""How the simulator's schedulers turn Score into decisions and competitive-ratio samples.

A decision is the first minimum, in row-major order, of the score matrix over
(pending task groups x candidate nodes) -- the cluster model's tie rule --
and a competitive-ratio sample needs each group's best score and the score of
one pair. Two ways to get them, with the same results:

* :class:`MatrixScoring` scores every pair with the interpreter: any policy.
* :class:`SplitScoring`, for a Score the compiler proved to be ``T(task) op
  N(node)`` (a :class:`ScoreSplit`), computes T once per task group and N
  once per node, each remembered for as long as what it reads (the task's or
  node's attributes, the State entries, the load) is unchanged, and finds the
  first minimum in O(T + N): because the combination is non-decreasing in N,
  every group's best node is the node with the smallest N, so the decision is
  the first group minimising ``T op n_min``, then the first node minimising
  that group's row. The values are combined by the same numpy operation as
  the interpreter's, so every score is bit-for-bit the matrix's.

Most of a replay's time went to the interpreter's per-call cost on matrices
of a few cells (two calls per dispatched task, and one per refused attempt);
the fast path makes a decision a few dictionary look-ups in the common case.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from ray_adaptive.dsl import ir
from ray_adaptive.dsl.interp import Interpreter, argmin_pair

__all__ = ["ScoreSplit", "MatrixScoring", "SplitScoring", "scoring_for"]

#: Score = op(T, N) (or op(N, T)): numpy's operation, exactly as the interpreter applies it
_COMBINE = {"+": np.add, "*": np.multiply, "max": np.maximum, "min": np.minimum}
_NODE_ATTRIBUTES = ("id", "index", "executors", "queue", "resources", "available", "load")
_PART = "__part__"  # the local a part's value is computed into
_MEMO_LIMIT = 100_000  # values remembered per part


@dataclass(frozen=True)
class ScoreSplit:
    """Score's return value is ``op(task, node)`` (``op(node, task)`` when ``node_first``).

    ``task`` reads no node, ``node`` reads no task (locals inlined), and the
    combination is non-decreasing in the node part for every value of the
    task part (see :func:`ray_adaptive.compiler.units.score_split`).
    """

    op: str  # "+" | "*" | "max" | "min"
    task: ir.Expr = field(repr=False)
    node: ir.Expr = field(repr=False)
    node_first: bool = False

    def __post_init__(self):
        if self.op not in _COMBINE:
            raise ValueError(f"ScoreSplit op must be one of {', '.join(_COMBINE)}, found {self.op!r}")


def _as_floats(values) -> np.ndarray:
    """A Score result as the matrix holds it: float, NaN read as inf (infeasible)."""
    out = np.asarray(values, dtype=float)
    return np.where(np.isnan(out), math.inf, out)


class _MatrixScores:
    """The scores of a (rows x candidates) decision, from the full matrix."""

    __slots__ = ("m",)

    def __init__(self, m: np.ndarray):
        self.m = m

    def argmin(self) -> Optional[tuple[int, int]]:
        return argmin_pair(self.m)

    def row_min(self) -> np.ndarray:
        return self.m.min(axis=1)

    def cell(self, i: int, j: int) -> float:
        return float(self.m[i, j])


class MatrixScoring:
    """Every pair scored by the interpreter; pairs whose task does not fit the node are infeasible."""

    def __init__(self, resources: bool = False):
        self.resources = resources

    def scores(self, interp: Interpreter, rows: Sequence, cands: Sequence, now: float) -> _MatrixScores:
        m = interp.score_matrix(rows, cands, now)
        if self.resources:
            fits = np.array([[c.fits(t) for c in cands] for t in rows], dtype=bool)
            m[~fits] = np.inf
        return _MatrixScores(m)

    def pair(self, interp: Interpreter, task, node, now: float) -> float:
        return float(interp.score_matrix([task], [node], now)[0, 0])


# ------------------------------------------------------------------ fast path


def _children(e: ir.Expr) -> tuple:
    if isinstance(e, ir.Index):
        return e.base, e.key
    if isinstance(e, ir.Unary):
        return (e.operand,)
    if isinstance(e, ir.Binary):
        return e.left, e.right
    if isinstance(e, ir.Call):
        return e.args
    if isinstance(e, ir.Cond):
        return e.test, e.then, e.orelse
    if isinstance(e, ir.VecLit):
        return e.items
    if isinstance(e, ir.MapLit):
        return (*e.keys, *e.values)
    return ()


def _state_reads(e: ir.Expr, obj: str) -> Optional[set]:
    """The State a part reads: ``("entry", var, attr)`` for ``var[obj.attr]`` of a map, ``("var", var, "")``
    for anything else; None when the part reads the clock (its value changes with time alone)."""
    if isinstance(e, ir.Call) and e.fn == "now":
        return None
    if (isinstance(e, ir.Index) and isinstance(e.base, ir.StateRef) and e.base.type.kind == "map"
            and isinstance(e.key, ir.FieldRef) and e.key.obj == obj):
        return {("entry", e.base.name, e.key.name)}
    out = {("var", e.name, "")} if isinstance(e, ir.StateRef) else set()
    for c in _children(e):
        sub = _state_reads(c, obj)
        if sub is None:
            return None
        out |= sub
    return out


def _freeze(v):
    """A hashable stand-in for a State value: equal stand-ins, equal values (and so equal results)."""
    if isinstance(v, np.ndarray):
        return v.dtype.str, v.shape, v.tobytes()
    if isinstance(v, dict):
        raise _Unhashable
    if isinstance(v, float):
        return float, v.hex()  # 0.0 == -0.0, yet 1 / x tells them apart
    return type(v), v


class _Unhashable(Exception):
    """A State value too big to remember results by (a whole map)."""


def _task_attr(task, name: str):
    return getattr(task, name) if name in ("id", "arrival") else task.fields[name]


def _node_attr(node, name: str):
    return getattr(node, name) if name in _NODE_ATTRIBUTES else node.fields[name]


class _Part:
    """One side of a split Score, evaluated by the interpreter for the items not remembered yet.

    A value is remembered under the item's identity (``ident``: the task's
    group key, the node's index and changing attributes) and the values of
    the State it reads: any change of those is a different key.
    """

    def __init__(self, expr: ir.Expr, obj: str, ident: Callable):
        self.stmts = (ir.Assign(ir.Local(_PART, expr.type), expr),)
        self.obj = obj
        self.ident = ident
        reads = _state_reads(expr, obj)
        self.reads = tuple(sorted(reads)) if reads is not None else None
        self.attr = _task_attr if obj == "task" else _node_attr
        self.memo: dict = {}
        self._runners: dict = {}

    def _key(self, state: dict, item):
        key = [self.ident(item)]
        for kind, var, attr in self.reads:
            v = state[var]
            key.append(_freeze(v.get(self.attr(item, attr)) if kind == "entry" else v))
        return tuple(key)

    def _evaluate(self, interp: Interpreter, items: list, now: float) -> list:
        run = self._runners.get(interp)
        if run is None:
            run = self._runners[interp] = interp.statements(self.stmts)
        tasks, nodes = (items, ()) if self.obj == "task" else ((), items)
        value = np.asarray(run(tasks, nodes, now)[_PART])
        return list(np.broadcast_to(value, (len(items), 1) if self.obj == "task" else (1, len(items))).reshape(-1))

    def values(self, interp: Interpreter, items: Sequence, now: float) -> np.ndarray:
        """The part's raw values (the interpreter's dtype) for ``items``."""
        if self.reads is None:
            return np.array(self._evaluate(interp, list(items), now))
        state, memo = interp.state, self.memo
        try:
            keys = [self._key(state, x) for x in items]
        except _Unhashable:
            return np.array(self._evaluate(interp, list(items), now))
        out = [memo.get(k) for k in keys]
        missing = [i for i, v in enumerate(out) if v is None]
        if missing:
            if len(memo) > _MEMO_LIMIT:  # a long run with ever-new State values: start afresh
                memo.clear()
            fresh = self._evaluate(interp, [items[i] for i in missing], now)
            for i, v in zip(missing, fresh):
                out[i] = memo[keys[i]] = v
        return np.array(out)


class _SplitScores:
    """The scores of a (rows x candidates) decision from the parts: ``S[i, j] = op(T[i], N[j])``."""

    __slots__ = ("split", "t", "n", "_best")

    def __init__(self, split: "SplitScoring", t: np.ndarray, n: np.ndarray):
        self.split, self.t, self.n = split, t, n
        self._best: Optional[int] = None

    def _best_node(self) -> int:
        """A node with the smallest N, NaN above everything (for ``min``, a NaN node part loses to +inf)."""
        if self._best is None:
            n = self.n
            if n.dtype.kind == "f" and np.isnan(n).any():
                ok = np.flatnonzero(~np.isnan(n))
                self._best = int(ok[np.argmin(n[ok])]) if ok.size else 0
            else:
                self._best = int(np.argmin(n))
        return self._best

    def row_min(self) -> np.ndarray:
        """Every row's best score: its score at the best node (the combination is non-decreasing in N)."""
        j = self._best_node()
        return _as_floats(self.split.combine(self.t, self.n[j:j + 1]))

    def argmin(self) -> Optional[tuple[int, int]]:
        if not (self.t.size and self.n.size):
            return None
        best = self.row_min()
        i = int(np.argmin(best))
        if best[i] == math.inf:
            return None
        return i, int(np.argmin(_as_floats(self.split.combine(self.t[i:i + 1], self.n))))

    def cell(self, i: int, j: int) -> float:
        return float(_as_floats(self.split.combine(self.t[i:i + 1], self.n[j:j + 1]))[0])


class SplitScoring:
    """Decisions for a split Score from its two parts (see the module docstring). No resource fit:
    a task that does not fit a node is a third, joint, condition."""

    def __init__(self, split: ScoreSplit, group: Optional[Callable] = None):
        self.op, self.node_first = _COMBINE[split.op], split.node_first
        self.task = _Part(split.task, "task", group or (lambda t: t))
        self.node = _Part(split.node, "node", self._node_ident(split.node))

    @staticmethod
    def _node_ident(expr: ir.Expr) -> Callable:
        """A node's static attributes are its index's; what changes while the cluster runs is added."""
        reads = {x.name for x in ir.walk(expr) if isinstance(x, ir.FieldRef) and x.obj == "node"}
        load = "load" in reads or any(isinstance(x, ir.Call) and x.fn == "get_load" for x in ir.walk(expr))
        available = "available" in reads
        return lambda n: (n.index, n.load if load else None,
                          tuple(sorted(n.available.items())) if available else None)

    def combine(self, t: np.ndarray, n: np.ndarray) -> np.ndarray:
        """``S`` for the pairs of ``t`` x ``n`` (one of them a single value), by the interpreter's operation.

        Floating-point warnings (inf - inf, ...) are the caller's to silence, as the interpreter does
        (the simulator runs under ``np.errstate(all="ignore")``): a context per call would cost more
        than the operation.
        """
        return self.op(n, t) if self.node_first else self.op(t, n)

    def scores(self, interp: Interpreter, rows: Sequence, cands: Sequence, now: float) -> _SplitScores:
        return _SplitScores(self, self.task.values(interp, rows, now), self.node.values(interp, cands, now))

    def pair(self, interp: Interpreter, task, node, now: float) -> float:
        return self.scores(interp, [task], [node], now).cell(0, 0)


def scoring_for(split: Optional[ScoreSplit], resources: bool, group: Optional[Callable] = None):
    """The fast path when Score splits and no task asks for resources; the matrix otherwise."""
    if split is not None and not resources:
        return SplitScoring(split, group)
    return MatrixScoring(resources)
