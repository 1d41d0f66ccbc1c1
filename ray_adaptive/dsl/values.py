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

Example:
    >>> from ray_adaptive.dsl import ir
    >>> zero_value(ir.INT), to_state(2.0, ir.FLOAT), vec_dtype(ir.vec(ir.INT)).name
    (0, 2.0, 'int64')
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ray_adaptive.dsl import ir
from ray_adaptive.dsl.limits import INT_MAX, INT_MIN, MAX_MAP_KEYS, MAX_STRING_CHARS
from ray_adaptive.errors import PolicyRuntimeError

__all__ = ["zero_value", "is_array", "as_vec_operand", "check_lengths", "vec_item", "vec_with", "reduce_vec",
           "vec_of", "vec_dtype", "to_state", "scalar_key", "to_int", "concat", "compare_strings", "map_set", "ARITH"]

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
