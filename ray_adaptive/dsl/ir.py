"""The typed IR of a policy: immutable dataclasses, each carrying its source location.

Everything after the checker (printer, interpreter, compiler) reads only these
classes. Source locations are excluded from equality (``compare=False``) so a
policy printed and parsed again compares equal to the original.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, Optional, Union


@dataclass(frozen=True)
class Loc:
    """A position in a policy file; line and column are 1-based."""

    file: str = "<policy>"
    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


NOWHERE = Loc()


def _loc() -> Loc:
    return field(default=NOWHERE, compare=False, repr=False)


# --------------------------------------------------------------------- types


@dataclass(frozen=True)
class Type:
    """A DSL type: ``int``, ``float``, ``bool``, ``string``, ``vec<T>`` or ``map<K, V>``.

    ``args`` holds the element type of a vec and the key/value types of a map.
    """

    kind: str
    args: tuple["Type", ...] = ()

    def __str__(self) -> str:
        if self.kind == "vec":
            return f"vec<{self.args[0]}>"
        if self.kind == "map":
            return f"map<{self.args[0]}, {self.args[1]}>"
        return self.kind

    @property
    def is_numeric(self) -> bool:
        return self.kind in ("int", "float", "bool")

    @property
    def elem(self) -> "Type":
        return self.args[0]

    def accepts(self, value: object) -> bool:
        """Whether a Python (JSON-like) value can stand for this type: finite numbers for
        ``float`` (not bools, not NaN, not infinite), 64-bit integers for ``int`` (not bools),
        lists for vecs, dicts with string keys for maps.

        Example:
            >>> vec(FLOAT).accepts([1, 2.5]), INT.accepts(True), STRING.accepts("a"), FLOAT.accepts(float("nan"))
            (True, False, True, False)
            >>> vec(FLOAT).accepts([float("inf"), 0.5, 0.0])
            False
        """
        k = self.kind
        if k == "string":
            return isinstance(value, str)
        if k == "bool":
            return isinstance(value, bool)
        if k == "int":  # (int is 64-bit: see ray_adaptive.dsl.limits)
            return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63
        if k == "float":
            return _is_float_value(value)
        if k == "vec":
            if not isinstance(value, (list, tuple)):
                return False
            return all(map(_is_float_value if self.elem.kind == "float" else self.elem.accepts, value))
        if k == "map":
            key_ok = STRING.accepts if self.args[0].kind == "string" else INT.accepts
            return isinstance(value, dict) and all(key_ok(a) and self.args[1].accepts(b) for a, b in value.items())
        return False


def _is_float_value(value: object) -> bool:
    """A finite number a float can hold: not NaN (it compares false with everything, so no decision could
    use it), not infinite (``inf - inf`` is NaN: a State that adds and takes it back would hold NaN), not
    an integer too large to convert."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return abs(value) < 2**1024 if isinstance(value, int) else math.isfinite(value)


INT = Type("int")
FLOAT = Type("float")
BOOL = Type("bool")
STRING = Type("string")
SCALAR_KINDS = ("int", "float", "bool", "string")


def vec(elem: Type) -> Type:
    return Type("vec", (elem,))


def map_of(key: Type, value: Type) -> Type:
    return Type("map", (key, value))


# --------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Const:
    value: Union[int, float, bool, str]
    type: Type
    loc: Loc = _loc()


@dataclass(frozen=True)
class Local:
    """A local variable of Score or a hook."""

    name: str
    type: Type
    loc: Loc = _loc()


@dataclass(frozen=True)
class StateRef:
    """A variable declared in ``State:``."""

    name: str
    type: Type
    loc: Loc = _loc()


@dataclass(frozen=True)
class FieldRef:
    """``task.<name>`` or ``node.<name>`` (declared fields and built-in attributes)."""

    obj: str  # "task" | "node"
    name: str
    type: Type
    loc: Loc = _loc()


@dataclass(frozen=True)
class Index:
    """``base[key]``: a map lookup (missing key reads the zero value) or a vec element."""

    base: "Expr"
    key: "Expr"
    type: Type
    loc: Loc = _loc()


@dataclass(frozen=True)
class Unary:
    op: str  # "-" | "not"
    operand: "Expr"
    type: Type
    loc: Loc = _loc()


@dataclass(frozen=True)
class Binary:
    """Arithmetic (``+ - * / %``, element-wise on vectors), comparison or ``and``/``or``."""

    op: str
    left: "Expr"
    right: "Expr"
    type: Type
    loc: Loc = _loc()


@dataclass(frozen=True)
class Call:
    """A call of a built-in function (see :data:`ray_adaptive.dsl.builtins.BUILTINS`)."""

    fn: str
    args: tuple["Expr", ...]
    type: Type
    loc: Loc = _loc()


@dataclass(frozen=True)
class Cond:
    """``then if test else orelse``."""

    test: "Expr"
    then: "Expr"
    orelse: "Expr"
    type: Type
    loc: Loc = _loc()


@dataclass(frozen=True)
class VecLit:
    items: tuple["Expr", ...]
    type: Type
    loc: Loc = _loc()


@dataclass(frozen=True)
class MapLit:
    keys: tuple["Expr", ...]
    values: tuple["Expr", ...]
    type: Type
    loc: Loc = _loc()


Expr = Union[Const, Local, StateRef, FieldRef, Index, Unary, Binary, Call, Cond, VecLit, MapLit]

ARITH_OPS = ("+", "-", "*", "/", "%")
COMPARE_OPS = ("==", "!=", "<", "<=", ">", ">=")
LOGIC_OPS = ("and", "or")

# ---------------------------------------------------------------- statements


@dataclass(frozen=True)
class Assign:
    """``target = value`` or, with ``op``, ``target op= value``."""

    target: Union[Local, StateRef, Index]
    value: Expr
    op: Optional[str] = None
    loc: Loc = _loc()


@dataclass(frozen=True)
class If:
    test: Expr
    body: tuple["Stmt", ...]
    orelse: tuple["Stmt", ...] = ()
    loc: Loc = _loc()


@dataclass(frozen=True)
class Return:
    value: Expr
    loc: Loc = _loc()


@dataclass(frozen=True)
class Pass:
    loc: Loc = _loc()


Stmt = Union[Assign, If, Return, Pass]

# ------------------------------------------------------------------- policy


@dataclass(frozen=True)
class FieldDecl:
    name: str
    type: Type
    loc: Loc = _loc()


def field_problem(decls: "tuple[FieldDecl, ...]", values: dict,
                  lengths: "Optional[Mapping[str, int]]" = None) -> "Optional[tuple[str, str, Optional[Type]]]":
    """The first mismatch between declared fields and a record's values, or None.

    Returns ``("unknown", name, None)``, ``("missing", name, type)``,
    ``("type", name, type)`` or ``("length", name, type)`` (a vec, or a map's vec
    values, not of the length ``lengths`` -- field name, or ``name[]`` for a
    map's values, to length: see :mod:`ray_adaptive.dsl.lengths` -- gives):
    callers word the error for their context (a scenario file, a ``task=`` option).

    Example:
        >>> field_problem((FieldDecl("tenant", STRING),), {"tenant": 3})
        ('type', 'tenant', Type(kind='string', args=()))
        >>> field_problem((FieldDecl("v", vec(FLOAT)),), {"v": [1.0]}, {"v": 3})[:2]
        ('length', 'v')
    """
    return field_checker(decls, lengths)(values)


def field_checker(decls: "tuple[FieldDecl, ...]", lengths: "Optional[Mapping[str, int]]" = None,
                  partial: bool = False) -> "Callable[[dict], Optional[tuple[str, str, Optional[Type]]]]":
    """:func:`field_problem` for many records against the same declarations (they are read once);
    ``partial``: a record may leave declared fields out (``.options()`` given some of them)."""
    declared = {d.name: d.type for d in decls}
    sized = {name: (lengths.get(name), lengths.get(name + "[]")) for name in declared} if lengths else {}

    def problem(values: dict):
        for name in values:
            if name not in declared:
                return ("unknown", name, None)
        for name, t in declared.items():
            if name not in values:
                if partial:
                    continue
                return ("missing", name, t)
            if not t.accepts(values[name]):
                return ("type", name, t)
            if name in sized and wrong_length(values[name], *sized[name]):
                return ("length", name, t)
        return None

    return problem


def wrong_length(value: object, length: Optional[int], values_length: Optional[int]) -> bool:
    """Whether a well-typed field value is a vec not of ``length``, or a map with a vec (at any depth)
    not of ``values_length`` (None: any length)."""
    if isinstance(value, dict):
        return values_length is not None and any(wrong_length(v, values_length, values_length)
                                                 for v in value.values())
    return length is not None and isinstance(value, (list, tuple)) and len(value) != length


@dataclass(frozen=True)
class StateDecl:
    name: str
    type: Type
    init: Optional[Expr] = None  # None: the type's zero value
    loc: Loc = _loc()


@dataclass(frozen=True)
class Function:
    """Score or a hook: its name, parameters (``task``[, ``node``]) and body."""

    name: str  # "Score" | "Preempt" | "OnArrival" | "OnDispatch" | "OnFinish" | "OnPreempt"
    params: tuple[str, ...]
    body: tuple[Stmt, ...]
    limit: Optional[float] = None  # Score only: the competitive-ratio limit
    loc: Loc = _loc()
    grace: Optional[float] = None  # Preempt only: seconds a victim runs on once chosen
    max_preemptions: Optional[int] = None  # Preempt only: times one task may be preempted


@dataclass(frozen=True)
class Policy:
    """A checked, typed policy. Build one with :func:`ray_adaptive.dsl.parse_policy`."""

    name: str
    task_fields: tuple[FieldDecl, ...]
    node_fields: tuple[FieldDecl, ...]
    state: tuple[StateDecl, ...]
    score: Function
    hooks: tuple[Function, ...] = ()
    file: str = field(default="<policy>", compare=False)
    #: ``Preempt(task, victim, node)``: which running task a waiting one may displace (None: it never does)
    preempt: Optional[Function] = None

    def hook(self, name: str) -> Optional[Function]:
        """The hook called ``name`` (``"OnArrival"``, ...), or None if the policy has none."""
        for h in self.hooks:
            if h.name == name:
                return h
        return None

    @property
    def limit(self) -> Optional[float]:
        return self.score.limit


# ------------------------------------------------------------------ walking


def children(node: "Expr | Stmt") -> tuple:
    """The nodes directly inside ``node``: sub-expressions, and for statements their parts, in source order."""
    if isinstance(node, Index):
        return node.base, node.key
    if isinstance(node, Unary):
        return (node.operand,)
    if isinstance(node, Binary):
        return node.left, node.right
    if isinstance(node, Call):
        return node.args
    if isinstance(node, Cond):
        return node.test, node.then, node.orelse
    if isinstance(node, VecLit):
        return node.items
    if isinstance(node, MapLit):
        return (*node.keys, *node.values)
    if isinstance(node, Assign):
        return node.target, node.value
    if isinstance(node, If):
        return (node.test, *node.body, *node.orelse)
    if isinstance(node, Return):
        return (node.value,)
    return ()


_STATEMENTS = (Assign, If, Return, Pass)


def walk(node: "Expr | Stmt") -> "Iterator[Expr]":
    """Every expression inside ``node`` (an expression or a statement, nested ones included), pre-order.

    Iterative, so that no depth of nesting a policy may hold reaches Python's recursion limit.
    """
    stack = [node]
    while stack:
        n = stack.pop()
        if not isinstance(n, _STATEMENTS):
            yield n
        stack.extend(reversed(children(n)))


def task_attributes_read(fn: Function) -> tuple[str, ...]:
    """Names of the task fields and attributes (``id``, ``arrival``) that ``fn`` reads, sorted.

    Two tasks equal on these get the same Score against any node: a scheduler
    may score one of them for both.
    """
    return tuple(sorted({e.name for s in fn.body for e in walk(s) if isinstance(e, FieldRef) and e.obj == "task"}))
