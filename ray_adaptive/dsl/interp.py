"""The reference semantics of a policy: its state, Score over pairs, its hooks.

:class:`Interpreter` is the *ideal* scheduler's brain: it scores every
(pending task, node) pair on exact state and runs the hooks. It compiles the
checked IR into Python closures (no ``eval``/``exec``; only the operations
below exist) that compute on numpy arrays laid out as

* a scalar: a Python value or an array broadcastable to ``(T, N)``
  (axis 0: tasks, axis 1: nodes);
* a vec: a ``(K,)`` array, or ``(T|1, N|1, K)``;
* a map: a ``dict``, or an object array of dicts (a map-typed field).

So Score runs once per decision over all T x N pairs rather than T x N times.
Hooks run on one task and one node, as Python functions generated from
their IR (:mod:`ray_adaptive.dsl.codegen`) with these same operations.

Semantics pinned here (and in docs/language.md):

* ``/`` is true division; ``x / 0`` is ``inf`` (``-inf``, or ``nan`` for
  ``0 / 0``); ``%`` follows Python (result has the divisor's sign).
* A NaN score counts as ``inf``: the pair is infeasible.
* A missing map key reads as the zero value of the map's value type
  (``0``, ``0.0``, ``false``, ``""``; for ``vec``: a zero vector that takes
  the length of whatever it is combined with).
* Vectors of different lengths in one operation raise PolicyRuntimeError.
* ``and``/``or`` evaluate both sides (no side effects exist to skip).
* ``int`` is 64-bit and wraps around; strings and State maps are bounded
  (see :mod:`ray_adaptive.dsl.values`).

The closures (``_Compiler``) and the interpreter that runs them are one module
(longer than most): together they are the reference semantics, which every
scheduler, the simulator and the ideal replay must agree with to the bit.
"""

from __future__ import annotations

import math
import operator
import threading
from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np

from ray_adaptive.dsl import ir
from ray_adaptive.dsl.codegen import compile_hook
from ray_adaptive.dsl.lengths import vec_lengths
from ray_adaptive.dsl.values import (ARITH, as_vec_operand, check_lengths, compare_strings, concat, is_array, map_set,
                                     reduce_vec, scalar_key, to_int, to_state, undo, vec_dtype, vec_item, vec_of,
                                     vec_with, zero_value)
from ray_adaptive.errors import PolicyRuntimeError

class TaskView(Protocol):
    """What the interpreter reads of a task."""

    id: str
    arrival: float
    fields: dict


class NodeView(Protocol):
    """What the interpreter reads of a node (``load`` = tasks queued + running)."""

    id: str
    index: int
    executors: int
    queue: int
    resources: dict
    fields: dict

    @property
    def available(self) -> dict: ...

    @property
    def load(self) -> int: ...


class VictimView(Protocol):
    """What the interpreter reads of a running task in ``Preempt(task, victim, node)``."""

    id: str
    arrival: float
    fields: dict
    started: float  # when its current run started
    preemptions: int  # times it was preempted before
    node: Any  # the NodeView it runs on



@dataclass
class _Env:
    tasks: Sequence[Any]
    nodes: Sequence[Any]
    state: dict
    now: float
    num_nodes: int
    locals: dict = field(default_factory=dict)
    columns: dict = field(default_factory=dict)
    ret: Any = None
    done: Any = False
    victims: Sequence[Any] = ()  # Preempt's running tasks, one per column (``nodes`` holds their nodes)


class _Compiler:
    """IR -> closures ``fn(env) -> value``."""

    def __init__(self, policy: ir.Policy):
        self.policy = policy
        task_types = {"id": ir.STRING, "arrival": ir.FLOAT, **{f.name: f.type for f in policy.task_fields}}
        node_types = {f.name: f.type for f in policy.node_fields}
        self.field_types = {"task": task_types, "node": node_types}

    # ------------------------------------------------------------ expressions
    def expr(self, e: ir.Expr) -> Callable[[_Env], Any]:
        method = getattr(self, "_" + type(e).__name__.lower())
        return method(e)

    def _const(self, e: ir.Const):
        v = to_int(e.value) if e.type.kind == "int" else e.value
        return lambda env: v

    def _local(self, e: ir.Local):
        name = e.name
        return lambda env: env.locals[name]

    def _stateref(self, e: ir.StateRef):
        name = e.name
        if e.type.kind == "int":  # (held as a Python int: int64 for the arithmetic on it)
            return lambda env: to_int(env.state[name])
        return lambda env: env.state[name]

    def _fieldref(self, e: ir.FieldRef):
        key = (e.obj, e.name)
        build = {"task": self._task_column, "node": self._node_column, "victim": self._victim_column}[e.obj]
        name, t = e.name, e.type

        def get(env: _Env):
            col = env.columns.get(key)
            if col is None:
                col = env.columns[key] = build(env, name, t)
            return col

        return get

    @staticmethod
    def _column(values: list, t: ir.Type, shape: tuple, what: str, ids: list) -> np.ndarray:
        if t.kind == "vec":
            lengths = {len(v) for v in values}
            if len(lengths) > 1:
                raise PolicyRuntimeError(f"{what} has vectors of different lengths {sorted(lengths)} across {', '.join(ids[:5])}")
            arr = np.asarray(values, dtype=vec_dtype(t))
            return arr.reshape(shape + (arr.shape[-1] if arr.ndim == 2 else 0,))
        if t.kind in ("string", "map"):
            arr = np.empty(len(values), dtype=object)
            arr[:] = values
            return arr.reshape(shape)
        dtype = {"int": np.int64, "float": float, "bool": bool}[t.kind]
        return np.asarray(values, dtype=dtype).reshape(shape)

    def _task_column(self, env: _Env, name: str, t: ir.Type):
        tasks = env.tasks
        if name == "id":
            values = [x.id for x in tasks]
        elif name == "arrival":
            values = [x.arrival for x in tasks]
        else:
            values = [x.fields[name] for x in tasks]
        return self._column(values, t, (len(tasks), 1), f"task field '{name}'", [x.id for x in tasks])

    def _victim_column(self, env: _Env, name: str, t: ir.Type):
        victims = env.victims
        if name in ("id", "arrival", "started", "preemptions"):
            values = [getattr(v, name) for v in victims]
        else:
            values = [v.fields[name] for v in victims]
        return self._column(values, t, (1, len(victims)), f"victim field '{name}'", [v.id for v in victims])

    def _node_column(self, env: _Env, name: str, t: ir.Type):
        nodes = env.nodes
        if name in ("id", "index", "executors", "queue", "resources", "available", "load"):
            values = [getattr(n, name) for n in nodes]
        else:
            values = [n.fields[name] for n in nodes]
        return self._column(values, t, (1, len(nodes)), f"node field '{name}'", [n.id for n in nodes])

    def _index(self, e: ir.Index):
        base, key = self.expr(e.base), self.expr(e.key)
        if e.base.type.kind == "vec":
            loc = e.loc

            def vec_index(env):
                v, i = base(env), key(env)
                k = np.shape(v)[-1]
                if is_array(i):
                    if np.any((i < -k) | (i >= k)):
                        raise PolicyRuntimeError(f"{loc}: vec index out of range (length {k})")
                    v = np.broadcast_to(v, np.broadcast_shapes(np.shape(i) + (k,), np.shape(v)) if np.ndim(v) == 3 else np.shape(i) + (k,))
                    return np.take_along_axis(v, np.broadcast_to(i, v.shape[:-1])[..., None], -1)[..., 0]
                return vec_item(v, i, loc)

            return vec_index
        vt = e.type
        zero = zero_value(vt)
        is_vec = vt.kind == "vec"
        loc = e.loc

        one = to_int if vt.kind == "int" else (lambda x: x)

        def lookup(env):
            m, k = base(env), key(env)
            if isinstance(m, dict) and not is_array(k):
                return one(m.get(scalar_key(k), zero))
            if isinstance(m, dict):  # one map (State), a key per lane: the common case
                shape = np.shape(k)
                get = m.get
                values = [get(kk, zero) for kk in (k.tolist() if k.ndim == 1 else k.ravel().tolist())]
            else:  # a map per lane (a map-typed field)
                ms, ks = np.broadcast_arrays(np.asarray(m, dtype=object), np.asarray(k, dtype=object))
                values = [mm.get(kk, zero) for mm, kk in zip(ms.flat, ks.flat)]
                shape = ks.shape
            if is_vec:
                lengths = {len(v) for v in values if v is not zero}
                if len(lengths) > 1:
                    raise PolicyRuntimeError(f"{loc}: map holds vectors of different lengths {sorted(lengths)}")
                width = lengths.pop() if lengths else 1
                filler = np.zeros(width)
                return np.asarray([filler if v is zero else v for v in values], dtype=float).reshape(shape + (width,))
            arr = np.empty(len(values), dtype=object)
            arr[:] = values
            if vt.kind != "string":
                arr = arr.astype({"int": np.int64, "float": float, "bool": bool}[vt.kind])
            return arr.reshape(shape)

        return lookup

    def _unary(self, e: ir.Unary):
        operand = self._number(self.expr(e.operand), e.operand.type, e.type)
        if e.op == "not":
            return lambda env: np.logical_not(operand(env))
        return lambda env: np.negative(operand(env))

    @staticmethod
    def _number(value, t: ir.Type, result: ir.Type):
        """``value`` -- an operand's closure, of type ``t`` -- as an operand of arithmetic with a ``result``
        of int type: a bool counts as an int64 0 or 1. (It takes the closure, not the operand's IR: compiling
        an operand twice made a chain of n operators cost 2**n.)"""
        if t == ir.BOOL and (result.kind == "int" or (result.kind == "vec" and result.elem.kind == "int")):
            return lambda env: to_int(value(env))
        return value

    _CMP = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}

    def _binary(self, e: ir.Binary):
        left, right = self.expr(e.left), self.expr(e.right)
        if e.op in ("and", "or"):
            fn = np.logical_and if e.op == "and" else np.logical_or
            return lambda env: fn(left(env), right(env))
        if e.op in self._CMP:
            fn = self._CMP[e.op]
            if e.left.type == ir.STRING and e.right.type == ir.STRING:
                return lambda env: compare_strings(fn, left(env), right(env))
            return lambda env: fn(left(env), right(env))
        fn = ARITH[e.op]
        lvec, rvec = e.left.type.kind == "vec", e.right.type.kind == "vec"
        loc = e.loc
        if e.type == ir.STRING:
            return lambda env: concat(left(env), right(env), loc)
        left, right = self._number(left, e.left.type, e.type), self._number(right, e.right.type, e.type)
        if not (lvec or rvec):
            return lambda env: fn(left(env), right(env))

        def vec_op(env):
            a = as_vec_operand(left(env), lvec)
            b = as_vec_operand(right(env), rvec)
            if lvec and rvec:
                check_lengths(a, b, loc)
            return fn(a, b)

        return vec_op

    def _call(self, e: ir.Call):
        fn = e.fn
        if fn == "now":
            return lambda env: env.now
        if fn == "num_nodes":
            return lambda env: to_int(env.num_nodes)
        if fn == "get_load":
            return self._fieldref(ir.FieldRef("node", "load", ir.INT))
        args = [self.expr(a) for a in e.args]
        arg_types = [a.type for a in e.args]
        loc = e.loc
        if fn in ("max", "min"):
            if len(args) == 1:
                (a,) = args
                return lambda env: reduce_vec(fn, a(env), loc)
            pair = np.maximum if fn == "max" else np.minimum
            return lambda env: reduce(pair, (a(env) for a in args))
        (a,) = args
        if fn == "sum":
            return lambda env: np.sum(a(env), axis=-1)
        if fn == "len":
            if arg_types[0].kind == "vec":
                return lambda env: to_int(np.shape(a(env))[-1])

            def map_len(env):
                m = a(env)
                return to_int(len(m)) if isinstance(m, dict) else np.vectorize(len, otypes=[np.int64])(m)

            return map_len
        if fn == "abs":
            a = self._number(a, e.args[0].type, e.type)
        ufunc = {"abs": np.abs, "sqrt": np.sqrt, "log": np.log}[fn]
        return lambda env: ufunc(a(env))

    def _cond(self, e: ir.Cond):
        test, then, orelse = self.expr(e.test), self.expr(e.then), self.expr(e.orelse)
        is_vec = e.type.kind == "vec"

        loc = e.loc

        def cond(env):
            c = test(env)
            if not is_array(c):
                return then(env) if c else orelse(env)
            a, b = then(env), orelse(env)
            if is_vec:  # (lanes hold one length: a lane's two branches must agree on it)
                check_lengths(a, b, loc)
                c = as_vec_operand(c, False)
            return np.where(c, a, b)

        return cond

    def _veclit(self, e: ir.VecLit):
        items = [self.expr(i) for i in e.items]
        dtype = vec_dtype(e.type)

        return lambda env: vec_of([i(env) for i in items], dtype)

    def _maplit(self, e: ir.MapLit):
        pairs = [(self.expr(k), self.expr(v), v.type) for k, v in zip(e.keys, e.values)]
        vt = e.type.args[1]
        return lambda env: {k(env): to_state(v(env), vt) for k, v, _ in pairs}

    # ------------------------------------------------------------- statements
    def block(self, stmts: Sequence[ir.Stmt]) -> Callable[[_Env, Any], None]:
        compiled = [self.stmt(s) for s in stmts]

        def run(env, mask):
            for s in compiled:
                done = env.done
                if done is True or (done is not False and np.all(done if mask is None else done | ~mask)):
                    return  # every lane this block runs for has returned
                s(env, mask)

        return run

    def stmt(self, s: ir.Stmt) -> Callable[[_Env, Any], None]:
        if isinstance(s, ir.Pass):
            return lambda env, mask: None
        if isinstance(s, ir.Return):
            value = self.expr(s.value)

            def ret(env, mask):
                active = _active(mask, env.done)
                v = value(env)
                if active is None:
                    env.ret, env.done = v, True
                else:
                    env.ret = np.where(active, v, np.nan if env.ret is None else env.ret)
                    env.done = np.logical_or(env.done, active)

            return ret
        if isinstance(s, ir.If):
            test, body, orelse = self.expr(s.test), self.block(s.body), self.block(s.orelse)

            def if_(env, mask):
                c = test(env)
                if is_array(c):
                    active = _active(mask, env.done)
                    lanes = c if active is None else c & active
                    if not np.any(lanes):
                        return orelse(env, mask)
                    if np.all(c if active is None else (c | ~active)):
                        return body(env, mask)
                    body(env, lanes)
                    others = ~c if active is None else (~c & active)
                    return orelse(env, others)
                return body(env, mask) if c else orelse(env, mask)

            return if_
        if isinstance(s, ir.Assign):
            return self._assign(s)
        raise TypeError(f"not an IR statement: {s!r}")

    def _assign(self, s: ir.Assign):
        value = self.expr(s.value)
        target = s.target
        if s.op is not None:
            # target op= value  ==  target = target op value (same typing rules)
            combined = ir.Binary(s.op, target, s.value, target.type, s.loc)
            value = self.expr(combined)
        if isinstance(target, ir.Local):
            name = target.name
            is_vec = target.type.kind == "vec"

            def assign_local(env, mask):
                v = value(env)
                active = _active(mask, env.done)
                if active is not None and name in env.locals:
                    m = as_vec_operand(active, False) if is_vec else active
                    v = np.where(m, v, env.locals[name])
                env.locals[name] = v

            return assign_local
        if isinstance(target, ir.StateRef):
            name, t = target.name, target.type

            def assign_state(env, mask):
                env.state[name] = to_state(value(env), t)

            return assign_state
        # state[key] = value
        base, key = self.expr(target.base), self.expr(target.key)
        t = target.type
        container_kind = target.base.type.kind

        def assign_item(env, mask):
            container, k = base(env), scalar_key(key(env))
            v = to_state(value(env), t)
            if container_kind == "vec":
                env.state[target.base.name] = vec_with(container, k, v, s.loc)
            else:
                map_set(container, k, v, s.loc)

        return assign_item


def _active(mask, done):
    """Lanes still executing: inside ``mask`` and not yet returned (None = all)."""
    if done is False:
        return mask
    if mask is None:
        return np.logical_not(done)
    return np.logical_and(mask, np.logical_not(done))


_PROGRAMS: dict = {}  # id(policy) -> (policy, Score, hooks, State initialisers)
_PROGRAMS_LOCK = threading.Lock()
_PROGRAMS_MAX = 64


def _program(policy: ir.Policy) -> tuple:
    """``policy`` compiled to closures, once per policy object: the closures keep nothing between calls
    (all they touch is the ``_Env`` they are given), so every interpreter of a policy -- a simulated
    plan has one per scheduler, and the compiler replays a dozen plans -- shares them."""
    with _PROGRAMS_LOCK:
        hit = _PROGRAMS.get(id(policy))
        if hit is not None and hit[0] is policy:  # (the entry keeps the policy alive: its id is not reused)
            return hit[1:]

    c = _Compiler(policy)
    lengths = vec_lengths(policy)
    program = (c.block(policy.score.body), {h.name: compile_hook(h, lengths) for h in policy.hooks},
               {d.name: c.expr(d.init) for d in policy.state if d.init is not None},
               c.block(policy.preempt.body) if policy.preempt is not None else None)
    with _PROGRAMS_LOCK:
        if len(_PROGRAMS) >= _PROGRAMS_MAX:
            _PROGRAMS.pop(next(iter(_PROGRAMS)))  # the oldest
        _PROGRAMS[id(policy)] = (policy, *program)
    return program


def _in(err: PolicyRuntimeError, function: str) -> PolicyRuntimeError:
    """``err`` saying in which function of the policy it was raised (its message has the line)."""
    return PolicyRuntimeError(f"{err} (in {function})")


class Interpreter:
    """One running instance of a policy: its State, Score and hooks.

    Example:
        >>> from ray_adaptive.dsl import load_policy
        >>> from ray_adaptive.dsl.interp import Interpreter
        >>> it = Interpreter(load_policy("least_loaded"))
        >>> it.state
        {}
    """

    def __init__(self, policy: ir.Policy, num_nodes: int = 0):
        self.policy = policy
        self.num_nodes = num_nodes
        self._score, self._hooks, inits, self._preempt = _program(policy)
        self.state: dict = {}
        empty = _Env((), (), {}, 0.0, num_nodes)
        with np.errstate(all="ignore"):
            try:
                for d in policy.state:
                    self.state[d.name] = to_state(inits[d.name](empty), d.type) if d.init is not None else (
                        {} if d.type.kind == "map" else to_state(zero_value(d.type), d.type)
                    )
            except PolicyRuntimeError as err:
                raise _in(err, "State") from None

    def score_matrix(self, tasks: Sequence[TaskView], nodes: Sequence[NodeView], now: float = 0.0) -> np.ndarray:
        """Score of every (task, node) pair as a float array of shape (len(tasks), len(nodes)).

        NaN scores are returned as ``inf`` (infeasible).
        """
        shape = (len(tasks), len(nodes))
        if 0 in shape:
            return np.empty(shape)
        env = _Env(tasks, nodes, self.state, now, self.num_nodes)
        with np.errstate(all="ignore"):
            try:
                self._score(env, None)
            except PolicyRuntimeError as err:
                raise _in(err, "Score") from None
            out = np.empty(shape)
            out[...] = env.ret  # broadcast and cast to float in one step
        np.copyto(out, math.inf, where=np.isnan(out))
        return out

    def preempt_matrix(self, tasks: Sequence[TaskView], victims: Sequence["VictimView"], now: float = 0.0) -> np.ndarray:
        """``Preempt(task, victim, node)`` of every (waiting task, running victim) pair, ``node`` being the
        victim's, as a float array of shape (len(tasks), len(victims)); NaN as ``inf`` (not allowed).
        All inf when the policy has no Preempt section."""
        shape = (len(tasks), len(victims))
        if self._preempt is None or 0 in shape:
            return np.full(shape, math.inf)
        env = _Env(tasks, [v.node for v in victims], self.state, now, self.num_nodes, victims=victims)
        with np.errstate(all="ignore"):
            try:
                self._preempt(env, None)
            except PolicyRuntimeError as err:
                raise _in(err, "Preempt") from None
            out = np.empty(shape)
            out[...] = env.ret
        np.copyto(out, math.inf, where=np.isnan(out))
        return out

    def score(self, task: TaskView, node: NodeView, now: float = 0.0) -> float:
        """Score of one pair (the same computation as one cell of :meth:`score_matrix`)."""
        return float(self.score_matrix([task], [node], now)[0, 0])

    def statements(self, stmts: Sequence[ir.Stmt]) -> Callable[..., dict]:
        """A runner for some statements of Score or a hook, on their own (the compiler profiles units with it).

        ``run(tasks, nodes, now=0.0, local_values=None)`` runs ``stmts`` over
        ``tasks`` x ``nodes`` with the given locals (e.g. those earlier
        statements assigned) and returns the locals afterwards. Statements
        that assign State change this interpreter's State.
        """
        block = _Compiler(self.policy).block(stmts)

        def run(tasks, nodes, now: float = 0.0, local_values: Optional[dict] = None) -> dict:
            env = _Env(tasks, nodes, self.state, now, self.num_nodes, dict(local_values or {}))
            with np.errstate(all="ignore"):
                block(env, None)
            return env.locals

        return run

    def run_hook(self, name: str, task: TaskView, node: Optional[NodeView] = None, now: float = 0.0) -> None:
        """Run ``OnArrival`` / ``OnDispatch`` / ``OnFinish`` (a no-op if the policy has none): all of
        it, or -- a PolicyRuntimeError, such as a write that would leave State non-finite -- none."""
        run = self.hook(name)
        if run is not None:
            with np.errstate(all="ignore"):
                run(task, node, now)

    def hook(self, name: str) -> Optional[Callable[..., None]]:
        """``run(task, node, now, journal=None)`` for the hook ``name`` on this interpreter's State, or
        None if the policy has none: for a caller that runs many, under one ``np.errstate(all="ignore")``
        it holds itself (:meth:`run_hook` holds one per call, ~3 us).

        A run is atomic: if the hook raises, its writes are undone before the error goes on. With a
        ``journal`` (a list), its writes are noted there too, so that the caller can undo several
        hooks of one task (:func:`~ray_adaptive.dsl.values.undo`): the submission of a task whose
        OnDispatch fails takes its OnArrival back."""
        hook = self._hooks.get(name)
        if hook is None:
            return None

        def run(task: TaskView, node: Optional[NodeView], now: float, journal: Optional[list] = None) -> None:
            j = [] if journal is None else journal
            mark = len(j)
            try:
                hook(task, node, self.state, now, self.num_nodes, j)
            except PolicyRuntimeError as err:
                undo(j, mark)
                raise _in(err, name) from None
            except BaseException:
                undo(j, mark)
                raise

        return run


def argmin_pair(scores: np.ndarray) -> Optional[tuple[int, int]]:
    """The decision for a score matrix, or None if every pair is infeasible.

    Rows must be ordered by (arrival, task id) and columns by node order: then
    numpy's first-minimum rule *is* the tie rule of the cluster model (earlier
    arrival, then task id, then node order).
    """
    if scores.size == 0:
        return None
    flat = int(np.argmin(scores))
    if scores.flat[flat] == math.inf:
        return None
    return divmod(flat, scores.shape[1])
