"""The values of the policy language: how each type is held, and the rules every evaluator shares.

The interpreter (:mod:`ray_adaptive.dsl.interp`) and the hooks generated as
Python (:mod:`ray_adaptive.dsl.codegen`) compute with these same functions,
so a value means the same in both:

* a scalar: a Python value or an array broadcastable to ``(T, N)``
  (axis 0: tasks, axis 1: nodes);
* a vec: a ``(K,)`` array of float64 or int64 (ints and bools), or ``(T|1, N|1, K)``;
* a map: a ``dict`` (a missing key reads as the value type's zero).

Numbers and sizes are bounded (:mod:`ray_adaptive.dsl.limits`), so no policy can
take the host down, whatever State it builds up:

* ``int`` is 64-bit: every int a policy computes is a numpy ``int64`` (a scalar
  or lanes), so arithmetic wraps around as in C, Java or numpy -- ``x = x * x``
  cannot grow without bound -- and a bool in arithmetic counts as 0 or 1;
  State keeps ints as Python ints, always within the 64-bit range;
* a string a policy computes is at most :data:`~ray_adaptive.dsl.limits.MAX_STRING_CHARS`
  characters and a State map holds at most :data:`~ray_adaptive.dsl.limits.MAX_MAP_KEYS`
  keys: past either, the policy stops with a PolicyRuntimeError naming the line.

State stays finite and its vecs keep their length: a hook writes State through
:func:`put` / :func:`put_item`, which refuse a float that is not finite (``inf -
inf`` is NaN, and a NaN in a tenant's allocation makes every later Score of
that tenant NaN: infeasible, for ever) or a vec of another length than the
place holds (:mod:`ray_adaptive.dsl.lengths`), and note each write in a journal
that :func:`undo` plays back, so a hook that fails leaves State as it found it.

Example:
    >>> from ray_adaptive.dsl import ir
    >>> zero_value(ir.INT), to_state(2.0, ir.FLOAT), vec_dtype(ir.vec(ir.INT)).name
    (0, 2.0, 'int64')
"""

from __future__ import annotations

import operator
from typing import Any, List, Optional

import numpy as np

from ray_adaptive.dsl import ir
from ray_adaptive.dsl.limits import INT_MAX, INT_MIN, MAX_MAP_KEYS, MAX_STRING_CHARS
from ray_adaptive.errors import PolicyRuntimeError

__all__ = ["zero_value", "is_array", "as_vec_operand", "check_lengths", "vec_item", "vec_with", "reduce_vec",
           "vec_of", "vec_dtype", "to_state", "scalar_key", "to_int", "concat", "compare_strings", "map_set", "ARITH",
           "WriteCheck", "put", "put_item", "undo"]

#: The arithmetic operators on numbers and vecs (element-wise), by their DSL spelling.
ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": np.true_divide, "%": np.mod}

_ZERO_VEC = np.zeros(1)


def zero_value(t: ir.Type) -> Any:
    """The value a missing map key reads as, and an uninitialised State variable starts at."""
    return {"int": 0, "float": 0.0, "bool": False, "string": ""}.get(t.kind) if t.kind not in ("vec", "map") else (
        _ZERO_VEC if t.kind == "vec" else {}
    )


def is_array(x) -> bool:
    return isinstance(x, np.ndarray) and x.ndim > 0


def as_vec_operand(x, is_vec: bool):
    """Give a scalar (T, N) array a trailing axis so it broadcasts against vecs."""
    if not is_vec and is_array(x) and x.ndim == 2:
        return x[..., None]
    return x


def check_lengths(a, b, loc: ir.Loc) -> None:
    """Vecs in one operation have one length -- but the zero vector a missing map key reads as (length 1,
    all zeros: see :func:`zero_value`) takes the length of the other. A length-1 vec that is not all
    zeros does not broadcast: that would silently repeat its element."""
    la = a.shape[-1:] if isinstance(a, np.ndarray) else np.shape(a)[-1:]  # (np.shape: a dispatch per call)
    lb = b.shape[-1:] if isinstance(b, np.ndarray) else np.shape(b)[-1:]
    if la and lb and la[0] != lb[0] and not ((la[0] == 1 and not np.any(a)) or (lb[0] == 1 and not np.any(b))):
        raise PolicyRuntimeError(f"{loc}: vectors of different lengths ({la[0]} and {lb[0]}) in one operation")


def vec_item(v, i, loc: ir.Loc):
    """``v[i]`` for one index (lanes of vecs share it)."""
    k = np.shape(v)[-1]
    if not -k <= i < k:
        raise PolicyRuntimeError(f"{loc}: vec index {i} out of range (length {k})")
    return v[..., i]


def vec_with(v, i, x, loc: ir.Loc):
    """A copy of vec ``v`` with item ``i`` set to ``x`` (values are never changed in place)."""
    vec_item(v, i, loc)
    v = v.copy()
    v[i] = x
    return v


def reduce_vec(fn: str, v, loc: ir.Loc):
    """``max(v)`` / ``min(v)`` of a vec (np.maximum.reduce: np.max without its dispatch)."""
    if np.shape(v)[-1] == 0:
        raise PolicyRuntimeError(f"{loc}: {fn}() of an empty vec")
    return (np.maximum if fn == "max" else np.minimum).reduce(v, axis=-1)


def vec_of(values: list, dtype):
    """A vec literal's value: its items' values, scalars or lanes."""
    if not any(is_array(v) for v in values):
        return np.array(values, dtype=dtype)
    values = np.broadcast_arrays(*[np.asarray(v) for v in values])
    return np.stack(values, axis=-1).astype(dtype)


def vec_dtype(t: ir.Type) -> np.dtype:
    """The numpy dtype a vec of type ``t`` is held in: float64, or int64 (ints and bools)."""
    return _FLOAT64 if t.elem.kind == "float" else _INT64


_FLOAT64, _INT64 = np.dtype(float), np.dtype(np.int64)


def to_state(value, t: ir.Type):
    """A computed value (possibly a (1, 1) array) as stored in State."""
    if t.kind == "vec":
        dtype = vec_dtype(t)
        return np.array(value, dtype=dtype).reshape(-1)
    if t.kind in ("map",):
        return value
    item = value.item() if isinstance(value, np.ndarray) or isinstance(value, np.generic) else value
    if t.kind == "int":
        item = int(item)
        return item if INT_MIN <= item <= INT_MAX else (item - INT_MIN) % 2**64 + INT_MIN  # (wrapped, as int64 does)
    return {"float": float, "bool": bool, "string": str}[t.kind](item)


def to_int(x):
    """An int-typed value as int64 -- a bool as 0 or 1, a Python int (from State, ``len``) as a numpy scalar --
    so that the arithmetic on it wraps around at 64 bits instead of growing."""
    return x.astype(_INT64) if is_array(x) else _INT64.type(x)


def _too_long(loc: ir.Loc, n: int) -> PolicyRuntimeError:
    return PolicyRuntimeError(f"{loc}: a string of {n:,} characters, over the limit of {MAX_STRING_CHARS:,}")


def concat(a, b, loc: ir.Loc):
    """``a + b`` on strings (lanes of them, or one), no longer than the limit."""
    if is_array(a) or is_array(b):
        a, b = np.broadcast_arrays(np.asarray(a, dtype=object), np.asarray(b, dtype=object))
        out = np.empty(a.shape, dtype=object)
        out.flat[:] = [concat(x, y, loc) for x, y in zip(a.flat, b.flat)]
        return out
    if len(a) + len(b) > MAX_STRING_CHARS:  # (checked before the string is built)
        raise _too_long(loc, len(a) + len(b))
    return a + b


def compare_strings(fn, a, b):
    """A comparison of strings, lane by lane when either side is lanes."""
    if is_array(a) or is_array(b):
        a, b = np.broadcast_arrays(np.asarray(a, dtype=object), np.asarray(b, dtype=object))
        return np.fromiter((fn(x, y) for x, y in zip(a.flat, b.flat)), bool, a.size).reshape(a.shape)
    return fn(a, b)


def map_set(m: dict, key, value, loc: ir.Loc) -> None:
    """``m[key] = value`` for a State map, which holds at most the limit's keys."""
    if len(m) >= MAX_MAP_KEYS and key not in m:
        raise PolicyRuntimeError(f"{loc}: a map would hold more than {MAX_MAP_KEYS:,} keys (the limit)")
    m[key] = value


def scalar_key(key):
    return key.item() if isinstance(key, (np.ndarray, np.generic)) else key


# ---------------------------------------------------------------- State writes (see the module doc)

_ABSENT = object()  # a map key a write added: undone by removing it


def _finite_vec(v: np.ndarray) -> bool:
    """Whether every element of a float vec is finite. A short vec's sum, on Python floats, is finite
    only if every element is (~0.2 us; numpy's isfinite costs ~1.5 us); a sum that overflowed is
    decided element by element."""
    if v.size <= 64:
        total = sum(v.tolist())
        if total - total == 0.0:
            return True
    return bool(np.isfinite(v).all())


def _zero_unit(v) -> bool:
    """The length-1 zero vec (a missing map key's value): it has no length of its own."""
    return v.shape[0] == 1 and not v[0]


def _shown(value) -> str:
    if isinstance(value, np.ndarray):
        items = [repr(x) for x in value[:8].tolist()]
        return "[" + ", ".join(items) + (", ..." if value.size > 8 else "") + "]"
    return repr(value)


class WriteCheck:
    """What a hook may write to one State place (a variable, or the values of a map): a float
    finite, a vec finite and of the place's length (``length``, if the policy fixes it; else the
    length the place holds). Raises PolicyRuntimeError at ``loc``, naming the place and value."""

    __slots__ = ("t", "loc", "place", "length", "_kind", "_values")

    def __init__(self, t: ir.Type, loc: ir.Loc, place: str, length: Optional[int] = None):
        self.t, self.loc, self.place, self.length = t, loc, place, length
        self._values = WriteCheck(t.args[1], loc, place, length) if t.kind == "map" else None
        # (what is checked, decided once: a write costs ~0.3 us)
        self._kind = {"float": "float", "vec": "fvec" if t.kind == "vec" and t.elem.kind == "float" else "vec",
                      "map": "map" if self._values is not None and self._values._kind else ""}.get(t.kind, "")

    def __call__(self, value, old, key=_ABSENT) -> None:
        kind = self._kind
        if kind == "float":
            if value - value != 0.0:  # (inf - inf and nan - nan are NaN)
                raise self._refused(value, key, "not a finite number")
        elif kind == "fvec" or kind == "vec":
            if kind == "fvec" and not _finite_vec(value):
                raise self._refused(value, key, "not finite")
            want = self.length
            if want is None and isinstance(old, np.ndarray) and not _zero_unit(old):
                want = old.shape[0]
            if want is not None and value.shape[0] != want and not _zero_unit(value):
                raise self._refused(value, key, f"a vec of length {value.shape[0]}, not {want}")
        elif kind == "map":
            values = self._values
            for k, v in value.items():  # (a whole map written: each of its values)
                values(v, old.get(k, _ABSENT) if isinstance(old, dict) else _ABSENT, k)  # type: ignore[misc]

    def _refused(self, value, key, why: str) -> PolicyRuntimeError:
        place = self.place if key is _ABSENT else f"{self.place}[{key!r}]"
        return PolicyRuntimeError(f"{self.loc}: {place} would become {_shown(value)}, {why}: "
                                  f"refused, State left as it was")


def put(container: dict, key: str, value, check: WriteCheck, journal: Optional[List]) -> None:
    """``container[key] = value`` (a State variable; a vec item's write stores a new vec), checked and journaled."""
    old = container.get(key, _ABSENT)
    check(value, old)
    if journal is not None:
        journal.append((container, key, old))
    container[key] = value


def put_item(m: dict, key, value, check: WriteCheck, journal: Optional[List]) -> None:
    """``m[key] = value`` for a State map (at most the limit's keys), checked and journaled."""
    old = m.get(key, _ABSENT)
    if old is _ABSENT and len(m) >= MAX_MAP_KEYS:
        raise PolicyRuntimeError(f"{check.loc}: a map would hold more than {MAX_MAP_KEYS:,} keys (the limit)")
    check(value, old, key)
    if journal is not None:
        journal.append((m, key, old))
    m[key] = value


def undo(journal: List, mark: int = 0) -> None:
    """Play the writes journaled since ``mark`` back, newest first: State as it was at ``mark``. (Values
    are never changed in place -- a vec write stores a new vec -- so the old ones are intact.)"""
    for container, key, old in reversed(journal[mark:]):
        if old is _ABSENT:
            container.pop(key, None)
        else:
            container[key] = old
    del journal[mark:]
