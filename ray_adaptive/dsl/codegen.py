"""Hooks as Python functions: a checked hook's IR lowered to Python source, compiled once.

A hook runs on one task and one node, on the path of every task: OnDispatch
in each decision, OnFinish at each completion. The interpreter's closures
are built for Score's (tasks x nodes) lanes; run on one lane they cost an
environment, a column cache and a closure call per IR node. Here
each hook becomes one straight-line function over the same values with the
same numpy operations, so it leaves exactly the State the lanes leave
(``tests/test_interp.py`` checks that on random steps of every shipped
policy and of one using every construct).

The source holds only names made here: the DSL's locals become ``v_<name>``
(checked identifiers), temporaries ``_t<i>``, and every constant, type and
source location a global ``_k<i>`` -- no policy text is ever pasted in, and
:func:`audit` checks each hook's source for exactly that before compiling it.

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> print(hook_source(load_policy("drf_lb").hook("OnDispatch")))
    def OnDispatch(task, node, state, now, num_nodes, _j=None):
        _t0 = state['alloc']
        _t1 = _scalar_key(task.fields['tenant'])
        _put_item(_t0, _t1, _fresh_to_state(_vec_op(_add, _map_get(state['alloc'], task.fields['tenant'], _k0), _vec(task.fields['resource_vec'], _k1), _k2), _k3), _k4, _j)

Every State write goes through ``_put`` / ``_put_item``
(:func:`~ray_adaptive.dsl.values.put`): checked -- finite, the place's vec
length -- and noted in the journal ``_j``, so that a hook that fails is undone.
"""

from __future__ import annotations

import io
import operator
import re
import tokenize
from functools import reduce
from typing import Callable, List, Mapping, Optional

import numpy as np

from ray_adaptive.dsl import ir
from ray_adaptive.dsl.builtins import NODE_ATTRIBUTES, NODE_HIDDEN, TASK_ATTRIBUTES
from ray_adaptive.dsl.values import (WriteCheck, check_lengths, concat, put, put_item, reduce_vec, scalar_key, to_int,
                                     to_state, vec_dtype, vec_item, vec_of, vec_with, zero_value)

__all__ = ["compile_hook", "hook_source", "audit"]

#: ``hook(task, node, state, now, num_nodes, journal=None)``; the caller holds ``np.errstate(all="ignore")``
Hook = Callable[..., None]

_TASK_ATTRIBUTES = tuple(TASK_ATTRIBUTES)
_NODE_ATTRIBUTES = (*NODE_ATTRIBUTES, *NODE_HIDDEN)  # (get_load(node) reads node.load)
_SCALAR_OF = {"int": "_int", "float": "_float", "bool": "_bool"}  # a field read as the lanes' dtype
_ARITH = {"+": "_add", "-": "_sub", "*": "_mul", "/": "_div", "%": "_mod"}
_COMPARE = ("==", "!=", "<", "<=", ">", ">=")
_UFUNC = {"abs": "_abs", "sqrt": "_sqrt", "log": "_log", "sum": "_sum"}


def _vec(value, dtype):
    return np.array(value, dtype=dtype).reshape(-1)


def _fresh_to_state(value, t: ir.Type):
    """:func:`~ray_adaptive.dsl.values.to_state` of a value just computed, that nothing else refers to: a vec already in
    State's form (1-D, its dtype) is kept, not copied."""
    if type(value) is np.ndarray and value.ndim == 1 and t.kind == "vec" and value.dtype == vec_dtype(t):
        return value
    return to_state(value, t)


def _map_get(m: dict, k, zero):
    return m.get(scalar_key(k), zero)


def _vec_op(fn, a, b, loc: ir.Loc):
    check_lengths(a, b, loc)
    return fn(a, b)


_RUNTIME = {
    "_vec": _vec, "_vec_item": vec_item, "_vec_with": vec_with, "_map_get": _map_get, "_vec_op": _vec_op,
    "_vec_of": vec_of, "_reduce_vec": reduce_vec, "_scalar_key": scalar_key, "_to_state": to_state,
    "_fresh_to_state": _fresh_to_state, "_to_int": to_int, "_concat": concat, "_put": put, "_put_item": put_item,
    "_int": np.int64, "_float": np.float64, "_bool": np.bool_,
    "_add": operator.add, "_sub": operator.sub, "_mul": operator.mul, "_div": np.true_divide, "_mod": np.mod,
    "_not": np.logical_not, "_neg": np.negative, "_and": np.logical_and, "_or": np.logical_or,
    "_max": np.maximum, "_min": np.minimum, "_abs": np.abs, "_sqrt": np.sqrt, "_log": np.log,
    "_sum": lambda v: np.sum(v, axis=-1), "_shape": np.shape, "_reduce": reduce,
}


class _Emitter:
    """One hook's source: lines, and the constants they name; ``lengths``: the policy's vec lengths
    (:mod:`ray_adaptive.dsl.lengths`), which its State writes keep."""

    def __init__(self, lengths: Optional[Mapping[str, int]] = None):
        self.lines: List[str] = []
        self.constants: dict = {}
        self._temps = 0
        self.lengths = lengths or {}

    def const(self, value) -> str:
        name = f"_k{len(self.constants)}"
        self.constants[name] = value
        return name

    def temp(self) -> str:
        self._temps += 1
        return f"_t{self._temps - 1}"

    # ------------------------------------------------------------ expressions
    def expr(self, e: ir.Expr) -> str:
        return getattr(self, "_" + type(e).__name__.lower())(e)

    def _const(self, e: ir.Const) -> str:
        return self.const(to_int(e.value) if e.type.kind == "int" else e.value)

    def _local(self, e: ir.Local) -> str:
        return _local_name(e.name)

    def _stateref(self, e: ir.StateRef) -> str:
        slot = _state_slot(e.name)
        return f"_to_int({slot})" if e.type.kind == "int" else slot  # (State holds Python ints)

    def _fieldref(self, e: ir.FieldRef) -> str:
        name = _identifier(e.name)
        if e.obj == "task":
            raw = f"task.{name}" if name in _TASK_ATTRIBUTES else f"task.fields[{name!r}]"
        else:
            raw = f"node.{name}" if name in _NODE_ATTRIBUTES else f"node.fields[{name!r}]"
        kind = e.type.kind
        if kind == "vec":
            return f"_vec({raw}, {self.const(vec_dtype(e.type))})"
        if kind in _SCALAR_OF:
            return f"{_SCALAR_OF[kind]}({raw})"
        return raw  # string, map: as given

    def _index(self, e: ir.Index) -> str:
        base, key = self.expr(e.base), self.expr(e.key)
        if e.base.type.kind == "vec":
            return f"_vec_item({base}, {key}, {self.const(e.loc)})"
        got = f"_map_get({base}, {key}, {self.const(zero_value(e.type))})"
        return f"_to_int({got})" if e.type.kind == "int" else got

    def _unary(self, e: ir.Unary) -> str:
        return f"{'_not' if e.op == 'not' else '_neg'}({self._number(e.operand, e.type)})"

    def _number(self, e: ir.Expr, result: ir.Type) -> str:
        """``e`` as an operand of arithmetic with a ``result`` of int type: a bool counts as an int64 0 or 1."""
        if e.type == ir.BOOL and (result.kind == "int" or (result.kind == "vec" and result.elem.kind == "int")):
            return self.const(to_int(e.value)) if isinstance(e, ir.Const) else f"_to_int({self.expr(e)})"
        return self.expr(e)

    def _binary(self, e: ir.Binary) -> str:
        if e.op in ("and", "or"):  # both sides evaluated, as on lanes
            return f"_{e.op}({self.expr(e.left)}, {self.expr(e.right)})"
        if e.op in _COMPARE:
            return f"({self.expr(e.left)} {e.op} {self.expr(e.right)})"
        if e.type == ir.STRING:
            return f"_concat({self.expr(e.left)}, {self.expr(e.right)}, {self.const(e.loc)})"
        left, right = self._number(e.left, e.type), self._number(e.right, e.type)
        fn = _ARITH[e.op]
        if e.left.type.kind == "vec" and e.right.type.kind == "vec":
            return f"_vec_op({fn}, {left}, {right}, {self.const(e.loc)})"
        return f"{fn}({left}, {right})"

    def _call(self, e: ir.Call) -> str:
        fn = e.fn
        if fn == "now":
            return "now"
        if fn == "num_nodes":
            return "_to_int(num_nodes)"
        if fn == "get_load":
            return self._fieldref(ir.FieldRef("node", "load", ir.INT))
        if fn == "abs":  # (before the arguments are emitted: each is emitted once)
            return f"_abs({self._number(e.args[0], e.type)})"
        args = [self.expr(a) for a in e.args]
        if fn in ("max", "min"):
            if len(args) == 1:
                return f"_reduce_vec({fn!r}, {args[0]}, {self.const(e.loc)})"
            return f"_reduce(_{fn}, ({', '.join(args)},))"
        if fn == "len":
            return f"_to_int(_shape({args[0]})[-1])" if e.args[0].type.kind == "vec" else f"_to_int(len({args[0]}))"
        return f"{_UFUNC[fn]}({args[0]})"

    def _cond(self, e: ir.Cond) -> str:
        return f"({self.expr(e.then)} if {self.expr(e.test)} else {self.expr(e.orelse)})"

    def _veclit(self, e: ir.VecLit) -> str:
        dtype = self.const(vec_dtype(e.type))
        return f"_vec_of([{', '.join(self.expr(i) for i in e.items)}], {dtype})"

    def _maplit(self, e: ir.MapLit) -> str:
        vt = self.const(e.type.args[1])
        pairs = ", ".join(f"{self.expr(k)}: _to_state({self.expr(v)}, {vt})" for k, v in zip(e.keys, e.values))
        return "{" + pairs + "}"

    def _stored(self, value: ir.Expr, t: ir.Type) -> str:
        """``value`` as State holds it (a vec copied unless nothing else refers to it)."""
        convert = "_fresh_to_state" if _fresh(value) else "_to_state"
        return f"{convert}({self.expr(value)}, {self.const(t)})"

    # ------------------------------------------------------------- statements
    def block(self, stmts, indent: str) -> None:
        if not stmts:
            self.lines.append(f"{indent}pass")
        for s in stmts:
            self.stmt(s, indent)

    def stmt(self, s: ir.Stmt, indent: str) -> None:
        if isinstance(s, ir.Pass):
            self.lines.append(f"{indent}pass")
        elif isinstance(s, ir.If):
            self.lines.append(f"{indent}if {self.expr(s.test)}:")
            self.block(s.body, indent + "    ")
            if s.orelse:
                self.lines.append(f"{indent}else:")
                self.block(s.orelse, indent + "    ")
        elif isinstance(s, ir.Assign):
            self._assign(s, indent)
        else:  # the checker refuses ``return`` in a hook
            raise TypeError(f"{getattr(s, 'loc', '?')}: a hook has no {type(s).__name__} statement")

    def _assign(self, s: ir.Assign, indent: str) -> None:
        target = s.target
        value = s.value if s.op is None else ir.Binary(s.op, target, s.value, target.type, s.loc)
        if isinstance(target, ir.Local):
            self.lines.append(f"{indent}{_local_name(target.name)} = {self.expr(value)}")
            return
        # every State write is checked (finite, the place's vec length) and journaled: see values.put
        if isinstance(target, ir.StateRef):
            self.lines.append(f"{indent}_put(state, {_state_key(target.name)}, {self._stored(value, target.type)}, "
                              f"{self._check(target.type, s.loc, target.name)}, _j)")
            return
        # state[key] = value: the container and key first, then the value (the lanes' order)
        container, key = self.temp(), self.temp()
        self.lines.append(f"{indent}{container} = {self.expr(target.base)}")
        self.lines.append(f"{indent}{key} = _scalar_key({self.expr(target.key)})")
        stored = self._stored(value, target.type)
        base = target.base
        if base.type.kind == "vec":  # a vec is never changed in place: State gets a new one
            self.lines.append(f"{indent}_put(state, {_state_key(base.name)}, _vec_with({container}, {key}, {stored}, "
                              f"{self.const(s.loc)}), {self._check(base.type, s.loc, base.name)}, _j)")
        else:  # (a map holds at most MAX_MAP_KEYS keys)
            name = base.name if isinstance(base, ir.StateRef) else "a map"
            check = self.const(WriteCheck(target.type, s.loc, name, self.lengths.get(f"state.{name}[]")))
            self.lines.append(f"{indent}_put_item({container}, {key}, {stored}, {check}, _j)")

    def _check(self, t: ir.Type, loc: ir.Loc, name: str) -> str:
        """The constant checking writes of State variable ``name``."""
        length = self.lengths.get(f"state.{name}[]" if t.kind == "map" else f"state.{name}")
        return self.const(WriteCheck(t, loc, name, length))


def _fresh(e: ir.Expr) -> bool:
    """Whether ``e``'s value is made by its evaluation (an operation's result), not read from
    State, a field or a local that something else still refers to."""
    return isinstance(e, (ir.Binary, ir.Unary, ir.Call, ir.VecLit))


_ASCII_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _identifier(name: str) -> str:
    if not _ASCII_NAME.fullmatch(name):  # the checker only lets ASCII identifiers through; never paste anything else
        raise ValueError(f"not an identifier: {name!r}")
    return name


def _local_name(name: str) -> str:
    return "v_" + _identifier(name)


def _state_slot(name: str) -> str:
    """Where State variable ``name`` is, to read."""
    return f"state[{_state_key(name)}]"


def _state_key(name: str) -> str:
    return repr(_identifier(name))


def _emit(hook: ir.Function, lengths: Optional[Mapping[str, int]] = None) -> _Emitter:
    em = _Emitter(lengths)
    # (``_j``: the journal of State writes, for the caller to undo them; None: not kept)
    em.lines.append(f"def {_identifier(hook.name)}(task, node, state, now, num_nodes, _j=None):")
    em.block(hook.body, "    ")
    return em


def hook_source(hook: ir.Function) -> str:
    """The Python source :func:`compile_hook` compiles for ``hook`` (to read; constants as ``_k<i>``)."""
    return "\n".join(_emit(hook).lines)


_WORDS = frozenset({"def", "if", "else", "pass", "len", "task", "node", "state", "now", "num_nodes", "fields", "_j", "None",
                    "OnArrival", "OnDispatch", "OnFinish", "OnPreempt", *_TASK_ATTRIBUTES, *_NODE_ATTRIBUTES, *_RUNTIME})
_MADE = re.compile(r"v_\w+|_[kt]\d+")  # a DSL local; a constant; a temporary


def audit(source: str) -> None:
    """Refuse source holding anything but what this module writes: its own words, ``v_<local>``,
    ``_k<i>``/``_t<i>`` names, identifiers as string keys, and the index ``-1``. Every
    constant of a policy is a ``_k<i>`` value, so no policy text can become code -- checked on
    each hook before it is compiled, not merely by construction."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME:
            ok = tok.string in _WORDS or _MADE.fullmatch(tok.string) is not None
        elif tok.type == tokenize.STRING:
            ok = re.fullmatch(r"'[A-Za-z_][A-Za-z0-9_]*'", tok.string) is not None
        elif tok.type == tokenize.NUMBER:
            ok = tok.string == "1"
        else:
            ok = tok.type in (tokenize.OP, tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT,
                              tokenize.ENDMARKER)
        if not ok:
            raise ValueError(f"generated hook source holds {tok.string!r} at line {tok.start[0]}: not ours")


def compile_hook(hook: ir.Function, lengths: Optional[Mapping[str, int]] = None) -> Hook:
    """``hook`` as a function ``fn(task, node, state, now, num_nodes, journal=None)`` that updates
    ``state``, each write checked (``lengths``: the policy's, see :mod:`ray_adaptive.dsl.lengths`)
    and noted in ``journal`` (see :func:`~ray_adaptive.dsl.values.undo`); call it under
    ``np.errstate(all="ignore")``, as :meth:`Interpreter.run_hook` does."""
    em = _emit(hook, lengths)
    source = "\n".join(em.lines)
    audit(source)
    namespace = {**_RUNTIME, **em.constants}
    exec(compile(source, f"<hook {hook.name} of {hook.loc.file}>", "exec"), namespace)  # (audited above)
    return namespace[hook.name]
