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

Whether Score splits into a task part and a node part is the next pass's
question (:mod:`~ray_adaptive.compiler.separability`); :func:`~ray_adaptive.compiler.analysis.analyze`
runs both.

Everything here is a pure function of the IR.

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> policy = load_policy("drf_lb")
    >>> [(u.id, u.label, u.side) for u in split_units(policy) if u.function == "Score"]
    [('Score.1', 'tscore', 'task'), ('Score.2', 'nscore', 'node'), ('Score.3', 'return', 'joint')]
    >>> [(v.name, v.merge) for v in classify_state(policy, split_units(policy))[1]]
    [('alloc', 'add'), ('capacity', 'const')]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional

from ray_adaptive.dsl import ir
from ray_adaptive.dsl.printer import format_expr

__all__ = ["Access", "Unit", "StateUpdate", "StateVar", "split_units", "classify_state", "expr_reads", "join_sides",
           "direct_side", "TASK", "NODE", "JOINT", "NONE"]

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


def join_sides(sides: Iterable[str]) -> str:
    s = set(sides) - {NONE}
    if not s:
        return NONE
    if JOINT in s or s == {TASK, NODE}:
        return JOINT
    return s.pop()


def direct_side(a: Access, local_sides: dict[str, str]) -> str:
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
            side = join_sides(direct_side(a, local_sides) for a in reads)
            for name in own_locals:
                local_sides[name] = join_sides((local_sides.get(name, NONE), side))
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
