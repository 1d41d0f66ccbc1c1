"""The length each vec of a policy must have, inferred from the vec literals it is combined with.

``vec<float>`` does not say how long a vector is, but a policy usually does:
DRF-LB adds ``task.resource_vec`` into ``alloc[task.tenant]`` and divides
that by ``capacity = [1.5, 2.0, 1.0]``, so every one of them has length 3,
and a task whose ``resource_vec`` is ``[1.0]`` can only fail -- at a Score or
a hook, later, on another task's turn. Knowing the length up front lets a
submission, a scenario and a State write refuse such a vector at once, with
the length expected.

Inference is unification: every vec-valued place -- a Task or Node field, a
State variable, the values of a map, a local -- gets a class; element-wise
operations, assignments and conditionals merge the classes of their vecs;
a vec literal of ``n`` items fixes its class's length to ``n``. A class fixed
to two lengths has none (the policy can only mean one in a branch never
taken). A length-1 literal of zeros fixes nothing: like the zero vector a
missing map key reads as, it takes the length of what it is combined with
(see :func:`~ray_adaptive.dsl.values.check_lengths`).

Places are named ``task.<field>``, ``node.<field>``, ``state.<var>``, and with
``[]`` for the vec values of a map (``state.alloc[]``).

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> lengths = vec_lengths(load_policy("drf_lb"))
    >>> lengths.get("task.resource_vec"), lengths.get("state.alloc[]"), lengths.get("task.tenant")
    (3, 3, None)
"""

from __future__ import annotations

import threading
from typing import Dict, Optional

from ray_adaptive.dsl import ir

__all__ = ["VecLengths", "vec_lengths"]

_CONFLICT = -1  # a class two literals fixed to different lengths


class VecLengths(dict):
    """Place name -> the length its vecs must have (only the places whose length is known); ``origin``:
    where each length comes from (the vec literal that fixed it), for messages."""

    def __init__(self, lengths: Dict[str, int], origin: Dict[str, ir.Loc]):
        super().__init__(lengths)
        self.origin = origin

    def why(self, place: str) -> str:
        """`` (the length of the vec literal at FILE:LINE:COL it is combined with)``, or "" if unknown."""
        loc = self.origin.get(place)
        return f" (the length of the vec literal at {loc} it is combined with)" if loc is not None else ""


class _Classes:
    """Union-find over vec places, each class with at most one length."""

    def __init__(self):
        self.parent: Dict[int, int] = {}
        self.length: Dict[int, int] = {}
        self.origin: Dict[int, ir.Loc] = {}
        self.places: Dict[str, int] = {}

    def fresh(self) -> int:
        c = len(self.parent)
        self.parent[c] = c
        return c

    def place(self, name: str) -> int:
        c = self.places.get(name)
        if c is None:
            c = self.places[name] = self.fresh()
        return c

    def find(self, c: int) -> int:
        while self.parent[c] != c:
            self.parent[c] = self.parent[self.parent[c]]
            c = self.parent[c]
        return c

    def fix(self, c: int, n: int, loc: ir.Loc) -> None:
        r = self.find(c)
        have = self.length.get(r)
        if have is None:
            self.length[r], self.origin[r] = n, loc
        elif have != n:
            self.length[r] = _CONFLICT

    def unify(self, a: Optional[int], b: Optional[int]) -> Optional[int]:
        if a is None or b is None:
            return a if b is None else b
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
            if rb in self.length:
                self.fix(ra, self.length[rb], self.origin.get(rb, ir.NOWHERE))
        return ra


def _holds_vecs(t: ir.Type) -> bool:
    """A vec, or a map whose values (at any depth) are vecs: a place with a length."""
    while t.kind == "map":
        t = t.args[1]
    return t.kind == "vec"


def _zero_unit(e: ir.VecLit) -> bool:
    """``[0]`` / ``[0.0]``: a length-1 zero vector, which takes the length of what it meets."""
    return len(e.items) == 1 and isinstance(e.items[0], ir.Const) and e.items[0].value == 0


class _Infer:
    def __init__(self):
        self.c = _Classes()
        self.fn = ""

    def _slot(self, name: str, t: ir.Type) -> Optional[int]:
        if not _holds_vecs(t):
            return None
        return self.c.place(name + ("[]" if t.kind == "map" else ""))

    def expr(self, e: ir.Expr) -> Optional[int]:
        """The class of ``e``'s vecs (None if it holds none); constraints of its sub-expressions recorded."""
        if isinstance(e, ir.Local):
            return self._slot(f"local:{self.fn}.{e.name}", e.type)
        if isinstance(e, ir.StateRef):
            return self._slot(f"state.{e.name}", e.type)
        if isinstance(e, ir.FieldRef):
            return self._slot(f"{e.obj}.{e.name}", e.type)
        if isinstance(e, ir.VecLit):
            for item in e.items:
                self.expr(item)
            c = self.c.fresh()
            if not _zero_unit(e):
                self.c.fix(c, len(e.items), e.loc)
            return c
        if isinstance(e, ir.MapLit):
            for k in e.keys:
                self.expr(k)
            c = None
            for v in e.values:
                c = self.c.unify(c, self.expr(v))
            return c if _holds_vecs(e.type) else None
        parts = [self.expr(p) for p in ir.children(e)]
        if isinstance(e, ir.Index):  # a map's value (or a map inside it) shares the map's class
            return parts[0] if e.base.type.kind == "map" and _holds_vecs(e.type) else None
        if isinstance(e, ir.Cond):
            parts = parts[1:]
        if not _holds_vecs(e.type) or (isinstance(e, ir.Call) and e.fn not in ("abs", "sqrt", "log")):
            return None
        c = None
        for p in parts:  # element-wise: an operation's vecs and its result have one length
            c = self.c.unify(c, p)
        return c

    def stmt(self, s: ir.Stmt) -> None:
        if isinstance(s, ir.Assign):
            value = s.value if s.op is None else ir.Binary(s.op, s.target, s.value, s.target.type, s.loc)
            target = s.target
            if isinstance(target, ir.Index):
                base = self.expr(target.base)
                self.expr(target.key)
                slot = base if target.base.type.kind == "map" else None
            else:
                slot = self.expr(target)
            self.c.unify(slot, self.expr(value))
        elif isinstance(s, ir.If):
            self.expr(s.test)
            for b in (*s.body, *s.orelse):
                self.stmt(b)
        elif isinstance(s, ir.Return):
            self.expr(s.value)

    def policy(self, p: ir.Policy) -> VecLengths:
        for d in p.state:
            if d.init is not None:
                self.c.unify(self._slot(f"state.{d.name}", d.type), self.expr(d.init))
        for fn in (p.score, *p.hooks):
            self.fn = fn.name
            for s in fn.body:
                self.stmt(s)
        lengths, origin = {}, {}
        for name, c in self.c.places.items():
            r = self.c.find(c)
            n = self.c.length.get(r)
            if n is not None and n != _CONFLICT and not name.startswith("local:"):
                lengths[name], origin[name] = n, self.c.origin[r]
        return VecLengths(lengths, origin)


_CACHE: dict = {}  # id(policy) -> (policy, VecLengths)
_CACHE_LOCK = threading.Lock()
_CACHE_MAX = 64


def vec_lengths(policy: ir.Policy) -> VecLengths:
    """The known vec lengths of ``policy``'s fields and State (see the module doc), once per policy object."""
    with _CACHE_LOCK:
        hit = _CACHE.get(id(policy))
        if hit is not None and hit[0] is policy:  # (the entry keeps the policy alive: its id is not reused)
            return hit[1]
    lengths = _Infer().policy(policy)
    with _CACHE_LOCK:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[id(policy)] = (policy, lengths)
    return lengths
