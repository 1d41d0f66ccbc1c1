"""The built-in names of the policy language: task/node attributes and functions.

This table is the whitelist: a policy can call nothing else and read no other
attribute. The checker uses the typing rules here; the interpreter implements
each entry in :mod:`ray_adaptive.dsl.interp`; the compiler reads ``remote``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from ray_adaptive.dsl.ir import FLOAT, INT, STRING, Type, map_of, vec

#: Attributes every task has, besides the fields its policy declares in ``Task:``.
TASK_ATTRIBUTES: dict[str, Type] = {
    "id": STRING,  # the task's id
    "arrival": FLOAT,  # when it reached the scheduler (seconds)
    # seconds since it reached the scheduler: the checker reads `task.waited` as `now() - task.arrival`
    # (a preempted task keeps its arrival, so its age runs on: see docs/language.md, Preemption)
    "waited": FLOAT,
}

#: What a task stands for in ``Preempt(task, victim, node)`` besides its fields: the running task.
VICTIM_ATTRIBUTES: dict[str, Type] = {
    "started": FLOAT,  # when its current run started: now() - victim.started is the work a preemption wastes
    "preemptions": INT,  # times it has been preempted before
}

#: What the checker reads ``obj.waited`` as: ``now() - obj.arrival`` (sugar, so every later stage -- the
#: compiler's Score split, the runtime -- sees only the clock and the arrival it already knows).
WAITED = "waited"

#: Attributes every node has, besides the fields its policy declares in ``Node:``.
NODE_ATTRIBUTES: dict[str, Type] = {
    "id": STRING,
    "index": INT,  # position in the cluster's node order (0-based)
    "executors": INT,  # tasks it runs at once
    "queue": INT,  # tasks it may hold waiting besides those running
    "resources": map_of(STRING, FLOAT),  # total resources, e.g. node.resources["CPU"]
    "available": map_of(STRING, FLOAT),  # not held by tasks dispatched to it
}


#: What a node record holds besides its attributes (the NodeView of the interpreter): a Node field of
#: that name would be shadowed by it in Score and the hooks, so the checker refuses one.
NODE_HIDDEN: dict[str, str] = {
    "load": "the node's tasks queued + running, which get_load(node) reads",
}


def _numeric_promote(types: Sequence[Type]) -> Type:
    return FLOAT if any(t.kind == "float" for t in types) else INT


def _sig_minmax(args: Sequence[Type]) -> "str | Type":
    if len(args) == 1:
        if args[0].kind != "vec":
            return "expected a vec or two or more numbers"
        return args[0].elem
    if len(args) < 2:
        return "expected a vec or two or more numbers"
    if not all(a.is_numeric for a in args):
        return "expected numbers (use max(v) for the largest element of a vec)"
    return _numeric_promote(args)


def _sig_sum(args):
    if len(args) != 1 or args[0].kind != "vec":
        return "expected one vec"
    return args[0].elem if args[0].elem.kind == "float" else INT


def _sig_len(args):
    if len(args) != 1 or args[0].kind not in ("vec", "map"):
        return "expected one vec or map"
    return INT


def _sig_abs(args):
    if len(args) != 1:
        return "expected one number or vec"
    a = args[0]
    if a.kind == "vec" or a.kind in ("int", "float"):
        return a
    if a.kind == "bool":
        return INT
    return "expected one number or vec"


def _sig_float_math(args):
    if len(args) != 1:
        return "expected one number or vec"
    a = args[0]
    if a.kind == "vec":
        return vec(FLOAT)
    if a.is_numeric:
        return FLOAT
    return "expected one number or vec"


def _sig_none(args):
    return "expected no arguments" if args else None


def _sig_node(args):
    return None  # checked structurally: the argument must be the name `node`


@dataclass(frozen=True)
class Builtin:
    name: str
    signature: str  # for error messages and docs
    doc: str
    check: Callable[[Sequence[Type]], "str | Type | None"]
    result: Optional[Type] = None  # fixed result type, when check returns None
    takes_node: bool = False  # its single argument must be `node`
    remote: bool = False  # a probe of another machine: costly and possibly stale


BUILTINS: dict[str, Builtin] = {
    b.name: b
    for b in (
        Builtin("max", "max(v) | max(a, b, ...)", "largest element / argument", _sig_minmax),
        Builtin("min", "min(v) | min(a, b, ...)", "smallest element / argument", _sig_minmax),
        Builtin("sum", "sum(v)", "sum of the elements", _sig_sum),
        Builtin("len", "len(v) | len(m)", "number of elements / keys", _sig_len),
        Builtin("abs", "abs(x)", "absolute value (element-wise)", _sig_abs),
        Builtin("sqrt", "sqrt(x)", "square root (element-wise)", _sig_float_math),
        Builtin("log", "log(x)", "natural logarithm (element-wise); log(0) = -inf", _sig_float_math),
        Builtin("now", "now()", "current time in seconds", _sig_none, result=FLOAT),
        Builtin("num_nodes", "num_nodes()", "nodes in the cluster", _sig_none, result=INT),
        Builtin(
            "get_load",
            "get_load(node)",
            "tasks queued + running on the node (a remote probe)",
            _sig_node,
            result=INT,
            takes_node=True,
            remote=True,
        ),
    )
}
