"""Stage 1 of the compiler: a policy's IR -> execution units, classified.

An *execution unit* is one top-level statement of Score or of a hook (the
paper, Section 5.2: "Line 7 and Line 8 can be considered as separate
execution units"). An ``if`` statement is one unit with its branches. For
each unit the pass records what it reads and writes:

* ``task``   -- a task field or attribute (``task.tenant``, ``task.arrival``);
* ``node``   -- a static node field or attribute (``node.index``, ``node.zone``);
* ``probe``  -- a *remote*, changing value of a node: ``get_load(node)`` and
  ``node.available`` (what the approximations of a plan act on);
* ``state``  -- a State variable;
* ``local``  -- a local variable of the same function;
* ``clock`` / ``cluster`` -- ``now()`` / ``num_nodes()``.

From the reads, every unit gets a **side**: ``task`` (depends on the task
only), ``node`` (on the node only), ``joint`` (on both) or ``none``. Locals
carry the side of the units that assign them, so ``return tscore * 1000 +
nscore`` is joint although it names no field.

Hooks' writes to State are classified as **mergeable** (``+=``/``-=``
deltas merge by addition; ``x = max(x, e)`` / ``min`` merge by max/min --
so replicas can apply each other's updates in any order) or not (plain
overwrites, ``*=``, mixed kinds): that decides whether a decentralized plan
may synchronise the variable periodically.

Finally, :func:`separability` decides whether Score is a monotone
combination of a task-only and a node-only part -- ``f(T(task), N(node))``
with ``f`` non-decreasing in both -- which is what makes the hybrid split
(central task choice by ``T``, per-node placement by ``N``) exact: then
``min over pairs of f = f(min T, min N)``.

Everything here is a pure function of the IR.

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> a = analyze(load_policy("drf_lb"))
    >>> [(u.id, u.label, u.side) for u in a.score_units]
    [('Score.1', 'tscore', 'task'), ('Score.2', 'nscore', 'node'), ('Score.3', 'return', 'joint')]
    >>> a.separability.form, a.separability.task_part, a.separability.node_part
    ('additive', 'max(alloc[task.tenant] / capacity) * 1000', 'get_load(node)')
    >>> [(v.name, v.merge) for v in a.state]
    [('alloc', 'add'), ('capacity', 'const')]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional

from ray_adaptive.dsl import ir
from ray_adaptive.dsl.printer import format_expr
from ray_adaptive.sim.scoring import ScoreSplit

__all__ = [
    "Access", "Unit", "StateUpdate", "StateVar", "Separability", "Analysis",
    "analyze", "split_units", "classify_state", "separability", "score_split", "expr_reads",
]

TASK, NODE, JOINT, NONE = "task", "node", "joint", "none"
#: Node attributes that change while the cluster runs: reading them is a remote probe.
DYNAMIC_NODE_ATTRIBUTES = frozenset({"available", "load"})


@dataclass(frozen=True, order=True)
class Access:
    """One thing a unit reads or writes: ``kind`` (task, node, probe, state, local, clock, cluster) and ``name``."""

    kind: str
    name: str

    def __str__(self) -> str:
        return {
            "task": f"task.{self.name}",
            "node": f"node.{self.name}",
            "probe": f"{self.name}(node)" if self.name == "get_load" else f"node.{self.name}",
            "state": f"state {self.name}",
            "local": self.name,
            "clock": "now()",
            "cluster": "num_nodes()",
        }[self.kind]


@dataclass(frozen=True)
class Unit:
    """An execution unit: one top-level statement of Score or a hook."""

    id: str  # "Score.1", "OnDispatch.1"
    function: str  # "Score" | "OnArrival" | "OnDispatch" | "OnFinish"
    label: str  # the local or state variable it assigns, "return", "if"
    text: str  # the statement's first line, as DSL text
    stmt: ir.Stmt = field(repr=False, compare=False)
    loc: ir.Loc = field(repr=False, compare=False)
    reads: tuple[Access, ...] = ()
    writes: tuple[Access, ...] = ()
    side: str = NONE  # task | node | joint | none

    @property
    def probes(self) -> bool:
        """True if the unit reads a remote, changing node value (``get_load(node)``, ``node.available``)."""
        return any(a.kind == "probe" for a in self.reads)

    @property
    def state_reads(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.reads if a.kind == "state")

    @property
    def state_writes(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.writes if a.kind == "state")

    def as_dict(self) -> dict:
        return {
            "id": self.id, "function": self.function, "label": self.label, "text": self.text,
            "line": self.loc.line, "side": self.side, "probes": self.probes,
            "reads": [str(a) for a in self.reads], "writes": [str(a) for a in self.writes],
        }


@dataclass(frozen=True)
class StateUpdate:
    """One write to a State variable inside a hook, and how replicas could merge it."""

    var: str
    unit: str  # id of the hook unit holding the write
    text: str
    merge: Optional[str]  # "add" | "max" | "min" | None (not mergeable)
    why: str

    def as_dict(self) -> dict:
        return {"var": self.var, "unit": self.unit, "text": self.text, "merge": self.merge, "why": self.why}


@dataclass(frozen=True)
class StateVar:
    """A State variable: who reads it in Score, who writes it in hooks, how its updates merge."""

    name: str
    type: str
    readers: tuple[str, ...]  # Score unit ids
    writers: tuple[str, ...]  # hook unit ids
    merge: str  # "const" (never written) | "add" | "max" | "min" | "none" (not mergeable)
    why: str

    @property
    def dynamic(self) -> bool:
        """Written by a hook, so replicas of it can go stale."""
        return self.merge != "const"

    @property
    def mergeable(self) -> bool:
        return self.merge in ("const", "add", "max", "min")

    def as_dict(self) -> dict:
        return {"name": self.name, "type": self.type, "readers": list(self.readers), "writers": list(self.writers),
                "merge": self.merge, "why": self.why}


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


@dataclass(frozen=True)
class Analysis:
    """Everything stage 1 knows about a policy: its units, State and Score's shape."""

    policy: ir.Policy = field(repr=False)
    units: tuple[Unit, ...]
    updates: tuple[StateUpdate, ...]
    state: tuple[StateVar, ...]
    separability: Separability

    @property
    def score_units(self) -> tuple[Unit, ...]:
        return tuple(u for u in self.units if u.function == "Score")

    @property
    def hook_units(self) -> tuple[Unit, ...]:
        return tuple(u for u in self.units if u.function != "Score")

    @property
    def score_side(self) -> str:
        return _join(u.side for u in self.score_units)

    @property
    def probes(self) -> bool:
        """Score reads a remote node value, so load approximations apply."""
        return any(u.probes for u in self.score_units)

    def var(self, name: str) -> StateVar:
        for v in self.state:
            if v.name == name:
                return v
        raise KeyError(name)

    def delta_hooks(self) -> tuple[str, ...]:
        """Hooks whose effect is a fixed delta per task: every State write is an ``add`` update
        (``+=``/``-=``) and nothing but task fields and constant State is read (no node, no clock,
        no branching on State). Running one is the same as adding a delta that depends only on the
        task's fields -- what lets the simulator compute it once per kind of task."""
        constant = {v.name for v in self.state if not v.dynamic}
        out = []
        for h in self.policy.hooks:
            units = [u for u in self.hook_units if u.function == h.name]
            updates = [x for x in self.updates if x.unit in {u.id for u in units}]
            if not updates or any(x.merge != "add" for x in updates):
                continue
            ok = True
            for u in units:
                written = set(u.state_writes)
                for a in u.reads:
                    if a.kind in ("node", "probe", "clock", "cluster"):
                        ok = False
                    elif a.kind == "state" and a.name not in constant and not (a.name in written and isinstance(u.stmt, ir.Assign)):
                        ok = False
                if isinstance(u.stmt, ir.If):
                    ok = False
            if ok:
                out.append(h.name)
        return tuple(out)

    def score_state(self) -> tuple[StateVar, ...]:
        """State variables Score reads that hooks change: what replicas must keep in sync."""
        return tuple(v for v in self.state if v.readers and v.dynamic)

    def as_dict(self) -> dict:
        return {
            "policy": self.policy.name,
            "units": [u.as_dict() for u in self.units],
            "state": [v.as_dict() for v in self.state],
            "updates": [u.as_dict() for u in self.updates],
            "separability": self.separability.as_dict(),
        }


# ------------------------------------------------------------------ walking


def expr_reads(e: ir.Expr) -> set[Access]:
    """What an expression reads (see :class:`Access`)."""
    out: set[Access] = set()
    for x in ir.walk(e):
        if isinstance(x, ir.FieldRef):
            if x.obj == "node" and x.name in DYNAMIC_NODE_ATTRIBUTES:
                out.add(Access("probe", x.name))
            else:
                out.add(Access(x.obj, x.name))
        elif isinstance(x, ir.StateRef):
            out.add(Access("state", x.name))
        elif isinstance(x, ir.Local):
            out.add(Access("local", x.name))
        elif isinstance(x, ir.Call):
            if x.fn == "get_load":
                out.add(Access("probe", "get_load"))
            elif x.fn == "now":
                out.add(Access("clock", "now"))
            elif x.fn == "num_nodes":
                out.add(Access("cluster", "num_nodes"))
    return out


def _stmts(stmts: Iterable[ir.Stmt]) -> Iterator[ir.Stmt]:
    """Statements, nested ones included, in source order."""
    for s in stmts:
        yield s
        if isinstance(s, ir.If):
            yield from _stmts(s.body)
            yield from _stmts(s.orelse)


def _target_access(target) -> Access:
    if isinstance(target, ir.Local):
        return Access("local", target.name)
    base = target
    while isinstance(base, ir.Index):
        base = base.base
    return Access("state", base.name)


def _stmt_accesses(s: ir.Stmt) -> tuple[set[Access], set[Access]]:
    reads: set[Access] = set()
    writes: set[Access] = set()
    for x in _stmts([s]):
        if isinstance(x, ir.Assign):
            reads |= expr_reads(x.value)
            w = _target_access(x.target)
            writes.add(w)
            if isinstance(x.target, ir.Index):
                reads |= expr_reads(x.target.key)
            if x.op is not None:
                reads.add(w)  # x op= e reads x
        elif isinstance(x, ir.If):
            reads |= expr_reads(x.test)
        elif isinstance(x, ir.Return):
            reads |= expr_reads(x.value)
    return reads, writes


def _join(sides: Iterable[str]) -> str:
    s = set(sides) - {NONE}
    if not s:
        return NONE
    if JOINT in s or s == {TASK, NODE}:
        return JOINT
    return s.pop()


def _direct_side(a: Access, local_sides: dict[str, str]) -> str:
    if a.kind == "task":
        return TASK
    if a.kind in ("node", "probe"):
        return NODE
    if a.kind == "local":
        return local_sides.get(a.name, NONE)
    return NONE


def _label(s: ir.Stmt) -> str:
    if isinstance(s, ir.Assign):
        t = _target_access(s.target)
        return t.name
    if isinstance(s, ir.Return):
        return "return"
    if isinstance(s, ir.If):
        return "if"
    return "pass"


def _first_line(s: ir.Stmt) -> str:
    if isinstance(s, ir.Assign):
        return f"{format_expr(s.target)} {s.op or ''}= {format_expr(s.value)}"
    if isinstance(s, ir.Return):
        return f"return {format_expr(s.value)}"
    if isinstance(s, ir.If):
        return f"if {format_expr(s.test)}: ..."
    return "pass"


# -------------------------------------------------------------------- units


def split_units(policy: ir.Policy) -> tuple[Unit, ...]:
    """Score's and then each hook's top-level statements as classified units."""
    units: list[Unit] = []
    for fn in (policy.score, *policy.hooks):
        local_sides: dict[str, str] = {}
        for i, s in enumerate(fn.body):
            reads, writes = _stmt_accesses(s)
            own_locals = {a.name for a in writes if a.kind == "local"}
            # a local the unit reads before assigning (x += 1) has the side of earlier units
            side = _join(_direct_side(a, local_sides) for a in reads)
            for name in own_locals:
                local_sides[name] = _join((local_sides.get(name, NONE), side))
            units.append(Unit(
                id=f"{fn.name}.{i + 1}", function=fn.name, label=_label(s), text=_first_line(s),
                stmt=s, loc=getattr(s, "loc", ir.NOWHERE),
                reads=tuple(sorted(reads)), writes=tuple(sorted(writes)), side=side,
            ))
    return tuple(units)


# -------------------------------------------------------------------- state


def _same_target(a: ir.Expr, b) -> bool:
    return a == b  # IR equality ignores source locations


def _update(s: ir.Assign, unit: Unit) -> StateUpdate:
    var = _target_access(s.target).name
    text = _first_line(s)
    value_reads_var = Access("state", var) in expr_reads(s.value)
    if s.op in ("+", "-"):
        if value_reads_var:
            return StateUpdate(var, unit.id, text, None, f"the delta reads {var} itself, so it depends on the order of updates")
        return StateUpdate(var, unit.id, text, "add", "+= / -= deltas: replicas merge by adding them")
    if s.op is None and isinstance(s.value, ir.Call) and s.value.fn in ("max", "min") and len(s.value.args) == 2:
        a, b = s.value.args
        other = b if _same_target(a, s.target) else a if _same_target(b, s.target) else None
        if other is not None and Access("state", var) not in expr_reads(other):
            return StateUpdate(var, unit.id, text, s.value.fn,
                               f"{var} = {s.value.fn}({var}, e): replicas merge by taking the {s.value.fn}")
    if s.op is not None:
        return StateUpdate(var, unit.id, text, None, f"{s.op}= does not commute with other replicas' updates")
    return StateUpdate(var, unit.id, text, None, "an overwrite: the last writer wins, replicas cannot merge it")


def classify_state(policy: ir.Policy, units: tuple[Unit, ...]) -> tuple[tuple[StateUpdate, ...], tuple[StateVar, ...]]:
    """Every State write in the hooks, and per State variable its readers, writers and merge rule."""
    updates: list[StateUpdate] = []
    for u in units:
        if u.function == "Score":
            continue
        for s in _stmts([u.stmt]):
            if isinstance(s, ir.Assign) and not isinstance(s.target, ir.Local):
                updates.append(_update(s, u))
    out = []
    for d in policy.state:
        readers = tuple(u.id for u in units if u.function == "Score" and d.name in u.state_reads)
        mine = [x for x in updates if x.var == d.name]
        writers = tuple(dict.fromkeys(x.unit for x in mine))
        if not mine:
            merge, why = "const", "never written by a hook: every replica holds the same value"
        else:
            kinds = {x.merge for x in mine}
            if None in kinds:
                bad = next(x for x in mine if x.merge is None)
                merge, why = "none", f"{bad.unit} `{bad.text}`: {bad.why}"
            elif len(kinds) > 1:
                merge, why = "none", f"updates of different kinds ({', '.join(sorted(kinds))}) do not commute"
            else:
                merge = kinds.pop()
                why = mine[0].why
        out.append(StateVar(d.name, str(d.type), readers, writers, merge, why))
    return tuple(updates), tuple(out)


# ------------------------------------------------------------- separability


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
    return _join(_direct_side(a, {}) for a in expr_reads(e))


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
    side = _join(u.side for u in score_units)
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


def analyze(policy: ir.Policy) -> Analysis:
    """Stage 1: units, State classification and Score's separability of ``policy``."""
    units = split_units(policy)
    updates, state = classify_state(policy, units)
    return Analysis(policy, units, updates, state, separability(policy, units))


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
    (:class:`ray_adaptive.sim.scoring.SplitScoring`).
    """
    if any(isinstance(s, ir.If) for s in policy.score.body):
        return None
    ret = _inlined_return(policy.score.body)
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
