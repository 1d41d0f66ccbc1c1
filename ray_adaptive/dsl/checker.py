"""Stage 2: untyped syntax -> checked, typed IR (:mod:`ray_adaptive.dsl.ir`).

This is also the security boundary. Bodies arrive as Python ``ast`` trees, and
only the node kinds handled below are accepted; everything else (imports,
attribute access outside ``task``/``node``, calls of anything but the
built-ins, loops, comprehensions, lambdas ...) is refused with a located
error. Nothing is evaluated here.

Three parts, one per idea:

* :class:`_Expressions` types one expression (a table from ``ast`` node kind
  to a small method) and knows the names in scope: fields, State, locals;
* :class:`_Statements` checks a body: assignments and their targets, ``if``
  and the locals each branch leaves assigned, ``return``;
* :class:`_Declarations` checks the sections -- fields, State and its
  initial values, Score and the hooks -- and builds the :class:`ir.Policy`.

They stay in one module (longer than most) because together they are the one
boundary every policy crosses: what is accepted is read here, in one place.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import math
import re
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from ray_adaptive.dsl import ir
from ray_adaptive.dsl.builtins import BUILTINS, NODE_ATTRIBUTES, NODE_HIDDEN, TASK_ATTRIBUTES, VICTIM_ATTRIBUTES, WAITED
from ray_adaptive.dsl.ir import BOOL, FLOAT, INT, STRING, Loc, Type
from ray_adaptive.dsl.limits import F_STRINGS, INT_MAX, INT_MIN
from ray_adaptive.dsl.parser import FUNCTION_PARAMS, Decl, SourcePolicy
from ray_adaptive.errors import PolicyError

_CONSTANT_NAMES = {"inf": (math.inf, FLOAT), "true": (True, BOOL), "false": (False, BOOL)}
_RESERVED = {"task", "node", "victim", *(_CONSTANT_NAMES), *BUILTINS}
#: The functions that return a value (and so may not change State): the others are hooks.
_SCORING = ("Score", "Preempt")
_ARITH = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Mod: "%"}
_COMPARE = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
# what a local may be called: the generated hooks name it v_<name>, and their audit accepts ASCII only
_LOCAL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOT_AN_OPERATOR = "this operator is not part of the policy language; use + - * / %"
_UNSUPPORTED = {
    ast.Import: "imports are not allowed: a policy can use only its Task, Node and State fields and the built-in functions",
    ast.ImportFrom: "imports are not allowed: a policy can use only its Task, Node and State fields and the built-in functions",
    ast.For: "loops are not part of the policy language; use vec operations (sum, max, min, len) instead",
    ast.While: "loops are not part of the policy language; use vec operations (sum, max, min, len) instead",
    ast.FunctionDef: "functions cannot be defined in a policy; write the logic in Score or a hook",
    ast.Lambda: "lambdas are not part of the policy language",
    ast.ListComp: "comprehensions are not part of the policy language; use vec operations",
    ast.GeneratorExp: "comprehensions are not part of the policy language; use vec operations",
    ast.Pow: "'**' is not part of the policy language; use sqrt() or multiply",
    ast.JoinedStr: F_STRINGS,
    ast.Global: "'global' is not needed: assign State variables directly in hooks",
    ast.Delete: "'del' is not part of the policy language; set the value to zero instead",
    ast.With: "'with' is not part of the policy language",
    ast.Try: "'try' is not part of the policy language",
    ast.Raise: "'raise' is not part of the policy language; return inf to mark a pair infeasible",
}


def _kind_name(node: ast.AST) -> str:
    return {
        ast.Tuple: "tuples", ast.Set: "sets", ast.Slice: "slices", ast.Starred: "'*' unpacking",
        ast.NamedExpr: "':=' assignments", ast.Await: "'await' expressions", ast.Dict: "map literals",
        ast.DictComp: "comprehensions", ast.SetComp: "comprehensions", ast.Yield: "'yield' expressions",
    }.get(type(node), f"'{type(node).__name__}'")


def did_you_mean(word: str, candidates) -> str:
    """``" (did you mean 'x'?)"`` for a close match among ``candidates``, else ``""``."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.75)
    return f" (did you mean '{close[0]}'?)" if close else ""


def assignable(src: Type, dst: Type) -> bool:
    """Can a value of type ``src`` be stored where ``dst`` is declared? (int widens to float.)"""
    if src == dst:
        return True
    widen = {("int", "float"), ("bool", "float"), ("bool", "int")}
    if (src.kind, dst.kind) in widen:
        return True
    if src.kind == dst.kind == "vec":
        return assignable(src.elem, dst.elem)
    if src.kind == dst.kind == "map":
        return src.args[0] == dst.args[0] and assignable(src.args[1], dst.args[1])
    return False


def _promote(a: Type, b: Type, op: str) -> Type:
    if op == "/" or "float" in (a.kind, b.kind):
        return FLOAT
    return INT


def _unify(a: Type, b: Type) -> Optional[Type]:
    if assignable(a, b):
        return b
    if assignable(b, a):
        return a
    return None


def _always_returns(stmts: Sequence[ir.Stmt]) -> bool:
    for s in stmts:
        if isinstance(s, ir.Return):
            return True
        if isinstance(s, ir.If) and _always_returns(s.body) and _always_returns(s.orelse):
            return True
    return False


@dataclass
class _Scope:
    function: str  # "Score", a hook name, or "State" for initialisers
    params: tuple[str, ...]
    locals: dict[str, Type] = field(default_factory=dict)
    assigned: set[str] = field(default_factory=set)


@dataclass
class _Names:
    """What a policy declares: its fields and State, shared by the three parts; and its errors."""

    src: SourcePolicy
    task_fields: dict[str, Type] = field(default_factory=dict)
    node_fields: dict[str, Type] = field(default_factory=dict)
    state: dict[str, Type] = field(default_factory=dict)

    def error(self, where: "ast.AST | Loc", message: str, kind: str):
        loc = where if isinstance(where, Loc) else self.src.loc(where)
        raise PolicyError(message, loc.file, loc.line, loc.col, kind)

    def loc(self, node: ast.AST) -> Loc:
        return self.src.loc(node)


# ------------------------------------------------------------------ expressions


class _Expressions:
    """Types one expression into IR; each ``ast`` node kind has its method (see ``_RULES``)."""

    def __init__(self, names: _Names):
        self.names = names
        self.error, self.loc = names.error, names.loc

    def check(self, e: ast.expr, scope: _Scope, expected: Optional[Type] = None) -> ir.Expr:
        rule: Optional[Callable] = self._RULES.get(type(e))
        if rule is None:
            self.error(e, _UNSUPPORTED.get(type(e), f"{_kind_name(e)} are not part of the policy language"), "unsupported")
        return rule(self, e, scope, expected)

    def want(self, e: ir.Expr, t: Type, node: ast.AST, what: str) -> None:
        if not assignable(e.type, t) or (t == BOOL and e.type != BOOL):
            self.error(node, f"expected {t} for {what}, found {e.type}", "type")

    # -- leaves
    def _constant(self, e: ast.Constant, scope, expected) -> ir.Expr:
        v, loc = e.value, self.loc(e)
        if type(v) is int:
            self._int_in_range(e, v)
        for py, t in ((bool, BOOL), (int, INT), (float, FLOAT), (str, STRING)):  # (bool before its base int)
            if isinstance(v, py):
                return ir.Const(v, t, loc)
        self.error(e, f"{type(v).__name__} literals are not part of the policy language", "unsupported")

    def _int_in_range(self, e: ast.AST, v: int, negated: bool = False) -> None:
        """int is 64-bit: a literal it cannot hold is an error (not a silent wrap, nor an OverflowError later)."""
        value = -v if negated else v
        if not INT_MIN <= value <= INT_MAX:
            self.error(e, f"integer literal {value} is out of int's 64-bit range [{INT_MIN}, {INT_MAX}]; "
                          "write it as a float (e.g. 1e30) if it need not be exact", "type")

    def _name(self, e: ast.Name, scope: _Scope, expected) -> ir.Expr:
        n, loc, state = e.id, self.loc(e), self.names.state
        if n in scope.locals:
            if n not in scope.assigned:
                self.error(e, f"'{n}' may be used before it is assigned", "name")
            return ir.Local(n, scope.locals[n], loc)
        if n in state:
            if scope.function == "State":
                self.error(e, "an initial value cannot read other State variables", "name")
            return ir.StateRef(n, state[n], loc)
        if n in _CONSTANT_NAMES:
            value, t = _CONSTANT_NAMES[n]
            return ir.Const(value, t, loc)
        if n in ("True", "False"):
            return ir.Const(n == "True", BOOL, loc)
        if n in ("task", "node", "victim"):
            if n == "node":
                self.need_node(e, scope, "'node'")
            if n == "victim":
                self.need_victim(e, scope)
            if scope.function == "State":
                self.error(e, f"an initial value cannot read '{n}'", "name")
            self.error(e, f"'{n}' is a record; read one of its fields, e.g. {n}.id", "type")
        if n in BUILTINS:
            self.error(e, f"'{n}' is a function; call it as {BUILTINS[n].signature}", "type")
        known = sorted(set(state) | set(scope.locals))
        hint = f"; known variables: {', '.join(known)}" if known else ""
        self.error(e, f"unknown name '{n}'{did_you_mean(n, known)}{hint}", "name")

    def _attribute(self, e: ast.Attribute, scope: _Scope, expected) -> ir.Expr:
        if not (isinstance(e.value, ast.Name) and e.value.id in ("task", "node", "victim")):
            self.error(e, "attributes can only be read from task and node (e.g. task.tenant, node.id)", "unsupported")
        obj = e.value.id
        if obj == "node":
            self.need_node(e.value, scope, "'node'")
        if obj == "victim":
            self.need_victim(e.value, scope)
        if scope.function == "State":
            self.error(e, f"an initial value cannot read '{obj}'", "name")
        fields = self.names.node_fields if obj == "node" else self.names.task_fields
        if obj == "victim":
            fields = {**fields, **VICTIM_ATTRIBUTES}
        if e.attr not in fields:
            at = Loc(self.names.src.file, e.end_lineno, e.end_col_offset - len(e.attr) + 1)  # the field name
            self.error(at, f"{obj} has no field '{e.attr}'{did_you_mean(e.attr, fields)}; its fields are {', '.join(sorted(fields))}", "name")
        loc = self.loc(e)
        if obj != "node" and e.attr == WAITED:  # sugar: the age of the task, see builtins.WAITED
            now = ir.Call("now", (), FLOAT, loc)
            return ir.Binary("-", now, ir.FieldRef(obj, "arrival", FLOAT, loc), FLOAT, loc)
        return ir.FieldRef(obj, e.attr, fields[e.attr], loc)

    def need_victim(self, node: ast.AST, scope: _Scope) -> None:
        if "victim" not in scope.params:
            where = "a State initial value" if scope.function == "State" else scope.function
            self.error(node, f"{where} has no victim; 'victim' (the running task a waiting one would displace) "
                             "is only available in Preempt(task, victim, node)", "name")

    def need_node(self, node: ast.AST, scope: _Scope, what: str) -> None:
        if "node" not in scope.params:
            where = "a State initial value" if scope.function == "State" else f"{scope.function}(task)"
            self.error(node, f"{where} has no node; {what} is only available in Score, OnDispatch and OnFinish "
                             "(and Preempt, OnPreempt)", "no-node")

    # -- operations
    def _subscript(self, e: ast.Subscript, scope: _Scope, expected) -> ir.Expr:
        if isinstance(e.slice, ast.Slice):
            self.error(e.slice, "slices are not part of the policy language", "unsupported")
        base, key, loc = self.check(e.value, scope), self.check(e.slice, scope), self.loc(e)
        if base.type.kind == "map":
            if not assignable(key.type, base.type.args[0]) or key.type.kind != base.type.args[0].kind:
                self.error(e.slice, f"expected a {base.type.args[0]} key for a {base.type}, found {key.type}", "type")
            return ir.Index(base, key, base.type.args[1], loc)
        if base.type.kind == "vec":
            if key.type.kind != "int":
                self.error(e.slice, f"expected an int index into a {base.type}, found {key.type}", "type")
            return ir.Index(base, key, base.type.elem, loc)
        self.error(e.value, f"cannot index a {base.type}; expected a map or a vec", "type")

    def _binop(self, e: ast.BinOp, scope: _Scope, expected) -> ir.Expr:
        op = _ARITH.get(type(e.op))
        if op is None:
            self.error(e, _UNSUPPORTED.get(type(e.op), _NOT_AN_OPERATOR), "unsupported")
        left, right = self.check(e.left, scope), self.check(e.right, scope)
        return ir.Binary(op, left, right, self.arith_type(e, op, left.type, right.type), self.loc(e))

    def arith_type(self, node, op: str, lt: Type, rt: Type) -> Type:
        if lt.is_numeric and rt.is_numeric:
            return _promote(lt, rt, op)
        if "vec" in (lt.kind, rt.kind) and all(t.kind == "vec" or t.is_numeric for t in (lt, rt)):
            elems = [t.elem if t.kind == "vec" else t for t in (lt, rt)]
            return ir.vec(_promote(elems[0], elems[1], op))
        if op == "+" and lt == rt == STRING:
            return STRING
        self.error(node, f"operator '{op}' expects numbers or vecs, found {lt} and {rt}", "type")

    def _unaryop(self, e: ast.UnaryOp, scope: _Scope, expected) -> ir.Expr:
        literal = e.operand.value if isinstance(e.operand, ast.Constant) and type(e.operand.value) is int else None
        if isinstance(e.op, ast.USub) and literal is not None:
            self._int_in_range(e, literal, negated=True)
            if literal == -INT_MIN:  # -9223372036854775808: the one literal whose digits alone int cannot hold
                return ir.Const(INT_MIN, INT, self.loc(e))
        operand = self.check(e.operand, scope)
        if isinstance(e.op, ast.Not):
            self.want(operand, BOOL, e.operand, "'not'")
            return ir.Unary("not", operand, BOOL, self.loc(e))
        if isinstance(e.op, (ast.USub, ast.UAdd)):
            t = operand.type
            if not (t.is_numeric or t.kind == "vec"):
                self.error(e.operand, f"expected a number or vec after unary '-', found {t}", "type")
            if isinstance(e.op, ast.UAdd):
                return operand
            return ir.Unary("-", operand, INT if t == BOOL else t, self.loc(e))
        self.error(e, "'~' is not part of the policy language", "unsupported")

    def _compare(self, e: ast.Compare, scope: _Scope, expected) -> ir.Expr:
        if len(e.ops) != 1:
            self.error(e, "chained comparisons are not supported; write 'a < b and b < c'", "unsupported")
        op = _COMPARE.get(type(e.ops[0]))
        if op is None:
            self.error(e, "only == != < <= > >= compare values ('in'/'is' are not part of the policy language; a missing map key reads as zero)", "unsupported")
        left, right = self.check(e.left, scope), self.check(e.comparators[0], scope)
        lt, rt = left.type, right.type
        if not ((lt.is_numeric and rt.is_numeric) or (lt == rt == STRING)):
            hint = "; compare a reduction such as max(v)" if "vec" in (lt.kind, rt.kind) else ""
            self.error(e, f"cannot compare {lt} with {rt} using '{op}'{hint}", "type")
        return ir.Binary(op, left, right, BOOL, self.loc(e))

    def _boolop(self, e: ast.BoolOp, scope: _Scope, expected) -> ir.Expr:
        op = "and" if isinstance(e.op, ast.And) else "or"
        values = [self.check(v, scope) for v in e.values]
        for v, node in zip(values, e.values):
            self.want(v, BOOL, node, f"'{op}'")
        out, loc = values[0], self.loc(e)
        for v in values[1:]:
            out = ir.Binary(op, out, v, BOOL, loc)
        return out

    def _ifexp(self, e: ast.IfExp, scope: _Scope, expected) -> ir.Expr:
        test = self.check(e.test, scope)
        self.want(test, BOOL, e.test, "the condition of 'x if c else y'")
        then, orelse = self.check(e.body, scope), self.check(e.orelse, scope)
        t = _unify(then.type, orelse.type)
        if t is None:
            self.error(e, f"both sides of 'x if c else y' must have one type, found {then.type} and {orelse.type}", "type")
        return ir.Cond(test, then, orelse, t, self.loc(e))

    def _call(self, e: ast.Call, scope: _Scope, expected) -> ir.Expr:
        if not isinstance(e.func, ast.Name):
            self.error(e.func, "only the built-in functions can be called", "unsupported")
        fn = BUILTINS.get(e.func.id)
        if fn is None:
            self.error(e.func, f"unknown function '{e.func.id}'{did_you_mean(e.func.id, BUILTINS)}; expected one of {', '.join(sorted(BUILTINS))}", "name")
        if e.keywords:
            self.error(e.keywords[0], f"{fn.name}() takes no keyword arguments", "unsupported")
        if fn.takes_node:
            return self._node_call(e, fn, scope)
        args = tuple(self.check(a, scope) for a in e.args)
        result = fn.check([a.type for a in args])
        if isinstance(result, str):
            found = ", ".join(str(a.type) for a in args)
            self.error(e, f"{fn.name}(): {result}; found ({found})", "type")
        return ir.Call(fn.name, args, result or fn.result, self.loc(e))

    def _node_call(self, e: ast.Call, fn, scope: _Scope) -> ir.Expr:
        """``get_load(node)``: its one argument is the name ``node`` itself."""
        def is_node(a):
            return isinstance(a, ast.Name) and a.id == "node"

        if len(e.args) != 1 or not is_node(e.args[0]):
            wrong = e.args[0] if e.args and not is_node(e.args[0]) else e.args[1] if len(e.args) > 1 else e
            self.error(wrong, f"expected {fn.signature}: its one argument is the name 'node'", "type")
        self.need_node(e.args[0], scope, f"{fn.name}(node)")
        return ir.Call(fn.name, (), fn.result, self.loc(e))

    # -- literals
    def _list(self, e: ast.List, scope: _Scope, expected) -> ir.Expr:
        items = tuple(self.check(i, scope) for i in e.elts)
        for item, node in zip(items, e.elts):
            if not item.type.is_numeric:
                self.error(node, f"vec elements must be numbers, found {item.type}", "type")
        if not items:
            if expected is None or expected.kind != "vec":
                self.error(e, "an empty vec needs a declared type; write it as a State initial value", "type")
            return ir.VecLit((), expected, self.loc(e))
        elem = FLOAT if any(i.type.kind == "float" for i in items) else INT
        if expected is not None and expected.kind == "vec" and assignable(ir.vec(elem), expected):
            elem = expected.elem
        return ir.VecLit(items, ir.vec(elem), self.loc(e))

    def _dict(self, e: ast.Dict, scope: _Scope, expected) -> ir.Expr:
        if expected is None or expected.kind != "map":
            self.error(e, "a map literal is only allowed as the initial value of a declared map", "type")
        kt, vt = expected.args
        for k, v in zip(e.keys, e.values):
            if k is None:  # {**other}: Python's tree holds no key for it
                self.error(v, "'**' unpacking is not part of the policy language; write the keys and values", "unsupported")
        keys = tuple(self.check(k, scope) for k in e.keys)
        values = tuple(self.check(v, scope, expected=vt) for v in e.values)
        for k, node in zip(keys, e.keys):
            if k.type != kt:
                self.error(node, f"expected a {kt} key, found {k.type}", "type")
        for v, node in zip(values, e.values):
            if not assignable(v.type, vt):
                self.error(node, f"expected a {vt} value, found {v.type}", "type")
        return ir.MapLit(keys, values, expected, self.loc(e))

    _RULES = {
        ast.Constant: _constant, ast.Name: _name, ast.Attribute: _attribute, ast.Subscript: _subscript,
        ast.BinOp: _binop, ast.UnaryOp: _unaryop, ast.Compare: _compare, ast.BoolOp: _boolop, ast.IfExp: _ifexp,
        ast.Call: _call, ast.List: _list, ast.Dict: _dict,
    }


# ------------------------------------------------------------------- statements


class _Statements:
    """Checks a body: each statement kind has its method (see ``_RULES``); ``scope`` tracks the locals."""

    def __init__(self, names: _Names, exprs: _Expressions):
        self.names, self.exprs = names, exprs
        self.error, self.loc = names.error, names.loc

    def block(self, stmts: Sequence[ast.stmt], scope: _Scope) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        for s in stmts:
            if out and _always_returns(out[-1:]):
                self.error(s, "unreachable code after return", "structure")
            out.append(self.stmt(s, scope))
        return tuple(out)

    def stmt(self, s: ast.stmt, scope: _Scope) -> ir.Stmt:
        rule = self._RULES.get(type(s))
        if rule is None:
            self.error(s, _UNSUPPORTED.get(type(s), f"{_kind_name(s)} statements are not part of the policy language"), "unsupported")
        return rule(self, s, scope)

    def _assign(self, s: ast.Assign, scope: _Scope) -> ir.Stmt:
        if len(s.targets) != 1:
            self.error(s, "chained assignment (a = b = ...) is not part of the policy language", "unsupported")
        value = self.exprs.check(s.value, scope)
        target = self.target(s.targets[0], scope, value.type, op=None)
        return ir.Assign(target, value, None, self.loc(s))

    def _augassign(self, s: ast.AugAssign, scope: _Scope) -> ir.Stmt:
        op = _ARITH.get(type(s.op))
        if op is None:
            self.error(s, _UNSUPPORTED.get(type(s.op), _NOT_AN_OPERATOR), "unsupported")
        value = self.exprs.check(s.value, scope)
        target = self.target(s.target, scope, value.type, op=op)
        return ir.Assign(target, value, op, self.loc(s))

    def _if(self, s: ast.If, scope: _Scope) -> ir.Stmt:
        test = self.exprs.check(s.test, scope)
        self.exprs.want(test, BOOL, s.test, "an if condition")
        before = set(scope.assigned)
        body = self.block(s.body, scope)
        after_body, scope.assigned = scope.assigned, set(before)
        orelse = self.block(s.orelse, scope)
        after_else = scope.assigned
        # a branch that returns does not fall through, so it does not restrict
        if _always_returns(body):
            after_body = after_else
        if _always_returns(orelse):
            after_else = after_body
        scope.assigned = after_body & after_else
        return ir.If(test, body, orelse, self.loc(s))

    def _return(self, s: ast.Return, scope: _Scope) -> ir.Stmt:
        if scope.function not in _SCORING:
            self.error(s, f"{scope.function} is a hook and returns no value; only Score and Preempt return a score",
                       "structure")
        if s.value is None:
            self.error(s, "expected 'return <score>' with a number", "structure")
        value = self.exprs.check(s.value, scope)
        if not value.type.is_numeric:
            hint = "; reduce it with max(), min() or sum()" if value.type.kind == "vec" else ""
            self.error(s.value, f"{scope.function} must return a number, found {value.type}{hint}", "type")
        return ir.Return(value, self.loc(s))

    def _pass(self, s: ast.Pass, scope: _Scope) -> ir.Stmt:
        return ir.Pass(self.loc(s))

    def _expr(self, s: ast.Expr, scope: _Scope) -> ir.Stmt:
        self.exprs.check(s.value, scope)
        self.error(s, "this expression's value is unused; expected an assignment, if, return or pass", "structure")

    _RULES = {ast.Assign: _assign, ast.AugAssign: _augassign, ast.If: _if, ast.Return: _return, ast.Pass: _pass,
              ast.Expr: _expr}

    # -- assignment targets
    def target(self, t: ast.expr, scope: _Scope, value_type: Type, op: Optional[str]):
        if isinstance(t, ast.Attribute):
            obj = t.value.id if isinstance(t.value, ast.Name) else "this"
            self.error(t, f"{obj} fields are read-only; keep values that change in State", "readonly")
        if isinstance(t, ast.Name):
            if t.id in self.names.state:
                return self._state_target(t, scope, value_type, op)
            return self._local_target(t, scope, value_type, op)
        if isinstance(t, ast.Subscript):
            return self._item_target(t, scope, value_type, op)
        self.error(t, f"cannot assign to {_kind_name(t)}; expected a variable or state[key]", "unsupported")

    def _state_target(self, t: ast.Name, scope: _Scope, value_type: Type, op: Optional[str]) -> ir.Expr:
        name = t.id
        self._state_writable(t, scope, name)
        ref = ir.StateRef(name, self.names.state[name], self.loc(t))
        self._check_store(t, ref.type, value_type, op, name)
        return ref

    def _local_target(self, t: ast.Name, scope: _Scope, value_type: Type, op: Optional[str]) -> ir.Expr:
        name = t.id
        if not _LOCAL_NAME.fullmatch(name):
            self.error(t, f"local name {name!r} has a character other than A-Z, a-z, 0-9 and '_'; "
                          "choose an ASCII name", "name")
        if name in _RESERVED:
            self.error(t, f"cannot assign to '{name}': it is a built-in name", "readonly")
        if scope.function == "State":
            self.error(t, "assignments are not allowed in an initial value", "unsupported")
        if name in scope.locals:
            if op is not None and name not in scope.assigned:
                self.error(t, f"'{name}' may be used before it is assigned", "name")
            self._check_store(t, scope.locals[name], value_type, op, name)
        else:
            if op is not None:
                self.error(t, f"unknown name '{name}'; '{op}=' needs a variable that already has a value", "name")
            scope.locals[name] = value_type
        scope.assigned.add(name)
        return ir.Local(name, scope.locals[name], self.loc(t))

    def _item_target(self, t: ast.Subscript, scope: _Scope, value_type: Type, op: Optional[str]) -> ir.Expr:
        if not (isinstance(t.value, ast.Name) and t.value.id in self.names.state):
            base = self.exprs.check(t.value, scope)
            what = "task and node fields are read-only" if isinstance(base, ir.FieldRef) else "only State variables can be updated by index"
            self.error(t, what, "readonly")
        self._state_writable(t.value, scope, t.value.id)
        index = self.exprs.check(t, scope)  # checks the key and gives the element type
        self._check_store(t, index.type, value_type, op, f"{t.value.id}[...]")
        return index

    def _state_writable(self, node: ast.AST, scope: _Scope, name: str) -> None:
        if scope.function in _SCORING:
            self.error(node, f"{scope.function} must not change state ('{name}'); update it in OnArrival, OnDispatch "
                             "or OnFinish", "readonly")

    def _check_store(self, node, dst: Type, value: Type, op: Optional[str], name: str) -> None:
        result = value
        if op is not None:
            result = self.exprs.arith_type(node, op, dst, value)
        if not assignable(result, dst):
            how = f"'{op}=' with a {value}" if op else f"a {value}"
            self.error(node, f"'{name}' is {dst}; cannot store {how} in it", "type")


# ----------------------------------------------------------------- declarations


class _Declarations:
    """The sections: Task and Node fields, State with its initial values, Score and the hooks."""

    def __init__(self, src: SourcePolicy, name: str):
        self.src, self.name = src, name
        self.names = _Names(src)
        self.exprs = _Expressions(self.names)
        self.stmts = _Statements(self.names, self.exprs)
        self.error = self.names.error

    def policy(self) -> ir.Policy:
        sections = self.src.sections
        task = self._fields(sections.get("Task"), TASK_ATTRIBUTES, self.names.task_fields)
        node = self._fields(sections.get("Node"), NODE_ATTRIBUTES, self.names.node_fields, NODE_HIDDEN)
        state = self._state(sections.get("State"))
        score = self._function(sections["Score"])
        hooks = tuple(self._function(sections[h]) for h in ("OnArrival", "OnDispatch", "OnFinish", "OnPreempt")
                      if h in sections)
        preempt = self._preempt(sections.get("Preempt"), sections.get("OnPreempt"))
        return ir.Policy(self.name, task, node, state, score, hooks, file=self.src.file, preempt=preempt)

    def _preempt(self, section, on_preempt) -> Optional[ir.Function]:
        """``Preempt(task, victim, node): [grace=S, max=K]``: a grace is required (how long a victim runs on
        is a promise to its user, not a default to overlook); ``max`` defaults to 1."""
        if section is None:
            if on_preempt is not None:
                self.error(on_preempt.loc, "OnPreempt runs only when a task is preempted, and this policy never "
                                           "preempts; add a Preempt(task, victim, node) section or remove OnPreempt",
                           "structure")
            return None
        if "grace" not in section.annotations:
            self.error(section.loc, "Preempt needs a grace period: write 'Preempt(task, victim, node): "
                                    "[grace=SECONDS]' (how long a victim runs on once chosen; 0 stops it at once)",
                       "structure")
        fn = self._function(section)
        return dataclasses.replace(fn, grace=float(section.annotations["grace"]),
                                   max_preemptions=int(section.annotations.get("max", 1)))

    def _fields(self, section, builtin: dict[str, Type], out: dict[str, Type],
                hidden: dict[str, str] = {}) -> tuple[ir.FieldDecl, ...]:  # noqa: B006 -- read only
        out.update(builtin)
        if section is None:
            return ()
        decls = []
        for d in section.decls:
            if d.name in builtin:
                self.error(d.loc, f"'{d.name}' is a built-in attribute of every {section.name.lower()}; choose another field name", "name")
            if d.name in hidden:
                self.error(d.loc, f"'{d.name}' is {hidden[d.name]}: a field by that name would be hidden by it; "
                                  "choose another field name", "name")
            out[d.name] = d.type
            decls.append(ir.FieldDecl(d.name, d.type, d.loc))
        return tuple(decls)

    def _state(self, section) -> tuple[ir.StateDecl, ...]:
        if section is None:
            return ()
        decls = []
        for d in section.decls:
            if d.name in _RESERVED:
                self.error(d.loc, f"'{d.name}' is a reserved name; choose another name for this State variable", "name")
            init = self._initialiser(d) if d.init is not None else None
            self.names.state[d.name] = d.type
            decls.append(ir.StateDecl(d.name, d.type, init, d.loc))
        return tuple(decls)

    def _initialiser(self, d: Decl) -> ir.Expr:
        value = self.exprs.check(d.init, _Scope("State", ()), expected=d.type)
        if not assignable(value.type, d.type):
            self.error(d.init, f"'{d.name}' is declared {d.type} but its initial value is {value.type}", "type")
        return value

    def _function(self, section) -> ir.Function:
        scope = _Scope(section.name, FUNCTION_PARAMS[section.name])
        body = self.stmts.block(section.body, scope)
        if section.name in _SCORING and not _always_returns(body):
            last = section.body[-1]
            self.error(last, f"{section.name} must end in a return on every path; expected 'return <score>'",
                       "structure")
        return ir.Function(section.name, scope.params, body, section.limit, section.loc)


def check_policy(src: SourcePolicy, name: str) -> ir.Policy:
    """Type-check ``src`` and build its IR; raises PolicyError at the first problem."""
    return _Declarations(src, name).policy()
