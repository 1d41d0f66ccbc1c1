"""How schedulers turn Score into decisions (and the simulator into competitive-ratio samples).

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
  that group's row. A two-sided Score is a float, so the parts are combined
  in IEEE double arithmetic on Python floats -- the very float64 operation
  the interpreter performs -- and every score is bit-for-bit the matrix's (a
  one-sided Score, T or N alone, combines nothing).

The interpreter's per-call cost dominates on matrices of a few cells (two
calls per dispatched task, and one per refused attempt); the fast path makes
a decision a few dictionary look-ups in the common case.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Sequence

import numpy as np

from ray_adaptive.dsl import ir
from ray_adaptive.dsl.interp import Interpreter, argmin_pair
from ray_adaptive.plan.nodeset import NodeSet

__all__ = ["ScoreSplit", "MatrixScoring", "SplitScoring", "scoring_for", "group_key", "row_key", "written_by_hooks",
           "NodeSet", "matrix_scores"]

_NODE_ATTRIBUTES = ("id", "index", "executors", "queue", "resources", "available", "load")
_PART = "__part__"  # the local a part's value is computed into
_MEMO_LIMIT = 100_000  # values remembered per part


@dataclass(frozen=True)
class ScoreSplit:
    """Score's return value is ``op(task, node)``, a float (in either operand order: the ops commute),
    or one-sided, of any numeric type: ``task`` alone (op ``"task"``) or ``node`` alone (op ``"node"``).

    ``task`` reads no node, ``node`` reads no task (locals inlined), and the
    combination is non-decreasing in the node part for every value of the
    task part (see :func:`ray_adaptive.compiler.units.score_split`).
    """

    op: str  # "+" | "*" | "max" | "min" | "task" | "node"
    task: Optional[ir.Expr] = field(default=None, repr=False)
    node: Optional[ir.Expr] = field(default=None, repr=False)

    def __post_init__(self):
        if self.op not in _COMBINE:
            raise ValueError(f"ScoreSplit op must be one of {', '.join(_COMBINE)}, found {self.op!r}")
        if (self.task is None) != (self.op == "node") or (self.node is None) != (self.op == "task"):
            raise ValueError(f"ScoreSplit {self.op!r} needs {'no' if self.op == 'node' else 'a'} task part "
                             f"and {'no' if self.op == 'task' else 'a'} node part")


class _MatrixScores:
    """The scores of a (rows x candidates) decision, from the full matrix."""

    __slots__ = ("m",)

    def __init__(self, m: np.ndarray):
        self.m = m

    def argmin(self) -> Optional[tuple[int, int]]:
        return argmin_pair(self.m)

    def row_min(self) -> list[float]:
        return self.m.min(axis=1).tolist()

    def cell(self, i: int, j: int) -> float:
        return float(self.m[i, j])


def matrix_scores(m: np.ndarray) -> _MatrixScores:
    """The scores of a decision given as its full matrix (rows x candidates)."""
    return _MatrixScores(m)


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


def _state_reads(e: ir.Expr, obj: str) -> Optional[set]:
    """The State a part reads: ``("entry", var, attr)`` for ``var[obj.attr]`` of a map, ``("var", var, "")``
    for anything else; None when the part reads the clock (its value changes with time alone)."""
    if isinstance(e, ir.Call) and e.fn == "now":
        return None
    if (isinstance(e, ir.Index) and isinstance(e.base, ir.StateRef) and e.base.type.kind == "map"
            and isinstance(e.key, ir.FieldRef) and e.key.obj == obj):
        return {("entry", e.base.name, e.key.name)}
    out = {("var", e.name, "")} if isinstance(e, ir.StateRef) else set()
    for c in ir.children(e):
        sub = _state_reads(c, obj)
        if sub is None:
            return None
        out |= sub
    return out


def _freeze(v):
    """A hashable stand-in for a State value: equal stand-ins, equal values (and so equal results)."""
    t = type(v)
    if t is np.ndarray:  # the common cases first: this runs for every task group at every decision
        return v.dtype.char, v.shape, v.tobytes()
    if t is float:
        return "f", v.hex()  # 0.0 == -0.0, yet 1 / x tells them apart
    if isinstance(v, dict):
        raise _Unhashable
    if isinstance(v, np.ndarray):
        return v.dtype.char, v.shape, v.tobytes()
    if isinstance(v, (float, np.floating)):
        return "f", float(v).hex()
    return t, v


def written_by_hooks(policy: ir.Policy) -> set[str]:
    """The State variables some hook assigns: all the others keep their initial values for a whole run."""

    def targets(stmts):
        for st in stmts:
            if isinstance(st, ir.If):
                yield from targets(st.body)
                yield from targets(st.orelse)
            elif isinstance(st, ir.Assign):
                t: ir.Expr = st.target
                while isinstance(t, ir.Index):
                    t = t.base
                if isinstance(t, ir.StateRef):
                    yield t.name

    return {name for h in policy.hooks for name in targets(h.body)}


class _Unhashable(Exception):
    """A State value too big to remember results by (a whole map)."""


def _task_attr(task, name: str):
    return task.fields[name] if name not in ("id", "arrival") else getattr(task, name)


def _node_attr(node, name: str):
    return getattr(node, name) if name in _NODE_ATTRIBUTES else node.fields[name]


class _Part:
    """One side of a split Score, evaluated by the interpreter for the items not remembered yet.

    A value is remembered under the item's identity (``ident``: the task's
    group key; the node's index and changing attributes) and the values of
    the State it reads: any change of those is a different key.

    A node part that reads nothing that changes but the node's load
    (``by_load``: least-loaded, DRF-LB's ``get_load``, bin packing) is also
    kept as a table of values by (node index, load), so a :class:`NodeSet`
    of candidates is scored with one numpy look-up.
    """

    def __init__(self, expr: ir.Expr, obj: str, ident: Callable, fixed: frozenset = frozenset(),
                 by_load: bool = False):
        self.stmts = (ir.Assign(ir.Local(_PART, expr.type), expr),)
        self.obj = obj
        reads = _state_reads(expr, obj)
        changing = None if reads is None else [r for r in sorted(reads) if r[1] not in fixed]
        self.key = None if changing is None else self._key_fn(
            ident, changing, _task_attr if obj == "task" else _node_attr)
        self.memo: dict = {}
        self._runners: dict = {}
        self.table: Optional[_LoadTable] = _LoadTable(self) if by_load and changing == [] else None

    @staticmethod
    def _key_fn(ident: Callable, reads: list, attr: Callable) -> Callable:
        """``key(state, item)``: the item's identity and the State values the part reads for it."""
        if not reads:
            return lambda state, item: ident(item)

        def getter(kind: str, var: str, a: str) -> Callable:
            if kind == "entry":
                return lambda state, item: _freeze(state[var].get(attr(item, a)))
            return lambda state, item: _freeze(state[var])

        if len(reads) == 1:  # DRF's alloc[task.tenant]
            get = getter(*reads[0])
            return lambda state, item: (ident(item), get(state, item))
        getters = [getter(*r) for r in reads]
        return lambda state, item: (ident(item), *[g(state, item) for g in getters])

    def _evaluate(self, interp: Interpreter, items: list, now: float) -> list[float]:
        run = self._runners.get(interp)
        if run is None:
            run = self._runners[interp] = interp.statements(self.stmts)
        tasks, nodes = (items, ()) if self.obj == "task" else ((), items)
        value = np.asarray(run(tasks, nodes, now)[_PART], dtype=float)  # Score's float64 (see score_split)
        return np.broadcast_to(value, (len(items), 1) if self.obj == "task" else (1, len(items))).reshape(-1).tolist()

    def values(self, interp: Interpreter, items: Sequence, now: float) -> list[float]:
        """The part's values for ``items``."""
        key = self.key
        if key is None:
            return self._evaluate(interp, list(items), now)
        state, memo = interp.state, self.memo
        try:
            keys = [key(state, x) for x in items]
        except _Unhashable:
            return self._evaluate(interp, list(items), now)
        out = [memo.get(k) for k in keys]
        if None in out:
            if len(memo) > _MEMO_LIMIT:  # a long run with ever-new State values: start afresh
                memo.clear()
            missing = [i for i, v in enumerate(out) if v is None]
            for i, v in zip(missing, self._evaluate(interp, [items[i] for i in missing], now)):
                out[i] = memo[keys[i]] = v
        return out  # type: ignore[return-value]  # (every None filled in)


class _LoadTable:
    """A node part's values by (node index, load), filled as candidates show new pairs."""

    def __init__(self, part: _Part):
        self.part = part
        self.values = np.zeros((0, 0))
        self.known = np.zeros((0, 0), dtype=bool)

    def _fit(self, rows: int, cols: int) -> None:
        r, c = self.values.shape
        if rows > r or cols > c:
            rows, cols = max(rows, r), max(cols, c, 4)
            values, known = np.zeros((rows, cols)), np.zeros((rows, cols), dtype=bool)
            values[:r, :c], known[:r, :c] = self.values, self.known
            self.values, self.known = values, known

    def lookup(self, interp: Interpreter, cands: NodeSet, now: float) -> np.ndarray:
        idx, loads = cands.idx, cands.loads
        if not len(idx):
            return np.zeros(0)
        self._fit(int(idx[-1]) + 1, int(loads.max()) + 1)
        known = self.known[idx, loads]
        if not known.all():
            miss = np.flatnonzero(~known)
            # (a candidate's object reads back the load it is listed with: the interpreter evaluates it so)
            got = self.part._evaluate(interp, [cands[j] for j in miss.tolist()], now)
            self.values[idx[miss], loads[miss]] = got
            self.known[idx[miss], loads[miss]] = True
        return self.values[idx, loads]


def _nan_max(a: float, b: float) -> float:
    return a if a != a or a >= b else b  # NaN wins, as in np.maximum


def _nan_min(a: float, b: float) -> float:
    return a if a != a or a <= b else b


#: op(T, N) on Python floats: IEEE double arithmetic, the very float64 operations Score performs
#: (a one-sided Score's missing part is 0 for every item)
_COMBINE: Dict[str, Callable[[Any, Any], Any]] = {"+": operator.add, "*": operator.mul, "max": _nan_max, "min": _nan_min,
            "task": lambda t, n: t, "node": lambda t, n: n}


def _infeasible_nan(x: float) -> float:
    return x if x == x else math.inf  # a NaN score counts as inf


#: op(T, N) over a numpy array of N: the same IEEE double operations, elementwise (NaN propagates as above)
_COMBINE_VEC: Dict[str, Callable[..., Any]] = {"+": np.add, "*": np.multiply, "max": np.maximum, "min": np.minimum,
                "task": lambda t, n: np.full(len(n), t), "node": lambda t, n: n}


class _SplitScores:
    """The scores of a (rows x candidates) decision from the parts: ``S[i, j] = op(T[i], N[j])``.

    ``n`` is a list, or a numpy array (candidates given as a :class:`NodeSet`); ``vec`` is then
    ``op`` over arrays.
    """

    __slots__ = ("op", "vec", "t", "n", "_rows")

    def __init__(self, op: Callable, t: list[float], n, vec: Optional[Callable] = None):
        self.op, self.vec, self.t, self.n = op, vec, t, n
        self._rows: Optional[list[float]] = None

    def _best_node_part(self) -> float:
        n = self.n
        if self.vec is not None:
            finite = n[n == n]
            return float(finite.min()) if finite.size else float(n[0])
        finite = [x for x in n if x == x]
        return min(finite) if finite else n[0]

    def row_min(self) -> list[float]:
        """Every row's best score: its score at a node with the smallest N (the combination is
        non-decreasing in N), NaN counting as worse than anything (under ``min``, a NaN node part
        loses to +inf)."""
        if self._rows is None:
            best, op = self._best_node_part(), self.op
            self._rows = [_infeasible_nan(op(t, best)) for t in self.t]
        return self._rows

    def argmin(self) -> Optional[tuple[int, int]]:
        if not (self.t and len(self.n)):
            return None
        if len(self.t) == 1 and self.vec is None:  # one task (a .remote() at an empty queue): its row decides
            t, op = self.t[0], self.op
            row = [_infeasible_nan(op(t, x)) for x in self.n]
            v = min(row)
            return None if v == math.inf else (0, row.index(v))
        rows = self.row_min()
        v = min(rows)
        if v == math.inf:
            return None
        i = rows.index(v)  # the first row holding the minimum: the matrix's row-major first minimum
        t, op = self.t[i], self.op
        if self.vec is not None:
            vec = self.vec(t, self.n)
            vec = np.where(vec == vec, vec, math.inf)
            return i, int(np.argmin(vec))  # the first minimum, as list.index(min(...))
        row = [_infeasible_nan(op(t, x)) for x in self.n]
        return i, row.index(min(row))

    def cell(self, i: int, j: int) -> float:
        return _infeasible_nan(self.op(self.t[i], float(self.n[j])))


class SplitScoring:
    """Decisions for a split Score from its two parts (see the module docstring). No resource fit:
    a task that does not fit a node is a third, joint, condition."""

    def __init__(self, split: ScoreSplit, group: Optional[Callable] = None, fixed_state: frozenset = frozenset()):
        """``group``: a task's group key (tasks Score cannot tell apart); ``fixed_state``: State
        variables that do not change (no hook writes them), left out of what a part's value is
        remembered by."""
        self.op, self.vec = _COMBINE[split.op], _COMBINE_VEC[split.op]
        self.task = _Part(split.task, "task", group or (lambda t: t), fixed_state) if split.task is not None else None
        self.node = None
        if split.node is not None:
            reads = {x.name for x in ir.walk(split.node) if isinstance(x, ir.FieldRef) and x.obj == "node"}
            self.node = _Part(split.node, "node", self._node_ident(split.node), fixed_state,
                              by_load="available" not in reads)

    @staticmethod
    def _node_ident(expr: ir.Expr) -> Callable:
        """A node's static attributes are its index's; what changes while the cluster runs is added."""
        reads = {x.name for x in ir.walk(expr) if isinstance(x, ir.FieldRef) and x.obj == "node"}
        load = "load" in reads or any(isinstance(x, ir.Call) and x.fn == "get_load" for x in ir.walk(expr))
        if "available" in reads:
            return lambda n: (n.index, n.load, tuple(sorted(n.available.items())))
        return (lambda n: (n.index, n.load)) if load else (lambda n: n.index)

    def scores(self, interp: Interpreter, rows: Sequence, cands: Sequence, now: float) -> _SplitScores:
        t = self.task.values(interp, rows, now) if self.task else [0.0] * len(rows)
        table = self.node.table if self.node is not None else None
        if isinstance(cands, NodeSet) and (self.node is None or table is not None):
            looked_up = table.lookup(interp, cands, now) if table is not None else np.zeros(len(cands))
            return _SplitScores(self.op, t, looked_up, self.vec)
        n = self.node.values(interp, cands, now) if self.node else [0.0] * len(cands)
        return _SplitScores(self.op, t, n)

    def pair(self, interp: Interpreter, task, node, now: float) -> float:
        return self.scores(interp, [task], [node], now).cell(0, 0)


def _hashable(v):
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    return v


def group_key(fn: ir.Function) -> Optional[Callable]:
    """``key(task)``, equal for tasks that ``fn`` (Score) cannot tell apart: the task attributes it reads.

    Such tasks score the same against every node whatever the State, so a
    decision need only score the earliest of each group. None when ``fn``
    reads ``task.id`` (every task differs). Tasks are anything with
    ``fields`` and ``arrival`` (the simulator's and the runtime's).
    """
    attrs = ir.task_attributes_read(fn)
    if "id" in attrs:
        return None
    arrival = "arrival" in attrs
    fields = [a for a in attrs if a != "arrival"]
    if arrival:
        return lambda t: (*[_hashable(t.fields[f]) for f in fields], t.arrival)
    return lambda t: tuple([_hashable(t.fields[f]) for f in fields])


def scoring_for(policy: ir.Policy, split: Optional[ScoreSplit], resources: bool, group: Optional[Callable] = None):
    """For ``policy``'s Score: the fast path when it splits and no task asks for resources; the matrix otherwise."""
    if split is not None and not resources:
        fixed = frozenset(d.name for d in policy.state) - written_by_hooks(policy)
        return SplitScoring(split, group, fixed)
    return MatrixScoring(resources)


def row_key(fn: ir.Function, resources: bool = False, cache: bool = False,
            shared: Optional[dict] = None) -> Optional[Callable]:
    """``key(task)`` for a pending queue: tasks that Score ``fn`` (and, with ``resources``, the
    resource fit) cannot tell apart share it; None when every task differs (``fn`` reads
    ``task.id`` or ``task.arrival``): the queue is then one ordered list.

    ``cache``: compute it once per task object (a simulation, whose tasks live for the run; a
    runtime queue would keep every task it ever saw). ``shared``: one cached key for every
    function reading the same task attributes.
    """
    if shared is not None:
        what = (ir.task_attributes_read(fn), resources)
        if what not in shared:
            shared[what] = row_key(fn, resources, cache)
        return shared[what]
    # a Score reading task.arrival tells every task apart in practice: one ordered list, not a group per task
    key = group_key(fn) if "arrival" not in ir.task_attributes_read(fn) else None
    if key is not None and resources:
        plain = key
        key = lambda t: (*plain(t), tuple(sorted(t.spec.resources.items())))  # noqa: E731
    return _cached(key) if cache and key is not None else key


def _cached(key: Callable) -> Callable:
    """``key`` computed once per task."""
    cache: dict = {}

    def get(t):
        k = cache.get(t)
        if k is None:
            k = cache[t] = key(t)
        return k

    return get

