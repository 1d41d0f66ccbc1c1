"""Replicated State: what a replica's hooks changed since its last push, and merging it.

Shared by the plan simulator's periodic sync and the runtime's state store.

The compiler classifies each State variable hooks change by how replicas
merge (``add`` for ``+=``/``-=`` deltas, ``max``/``min``, ``none``: last
writer wins; see :mod:`ray_adaptive.compiler.units`). A replica records its
hooks' changes in a :class:`DeltaLog`; the state store merges pushed deltas
with :func:`merge_into` and hands the merged State back.

Hooks assign new values (the interpreter never mutates a value in place), so
a changed entry is one whose object identity changed.

Example:
    >>> log = DeltaLog({"alloc": "add"})
    >>> state = {"alloc": {"a": 1.0}}
    >>> before = log.snapshot(state)
    >>> state["alloc"] = {"a": 3.0}
    >>> log.record(before, state); log.take()
    {'alloc': {'a': 2.0}}
"""

from __future__ import annotations

from typing import Any, Dict, Mapping

import numpy as np

__all__ = ["DeltaLog", "merge_into", "copy_state", "same_state"]


def copy_state(state: Mapping[str, Any]) -> dict:
    """A copy whose maps can change without touching ``state`` (values are never mutated in place)."""
    return {k: (dict(v) if isinstance(v, dict) else v) for k, v in state.items()}


def same_state(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two States hold equal values (vecs compared element-wise, maps key by key; NaN
    equals NaN: a value, not a difference)."""

    def same(x, y) -> bool:
        if isinstance(x, dict) or isinstance(y, dict):
            return (isinstance(x, dict) and isinstance(y, dict) and x.keys() == y.keys()
                    and all(same(x[k], y[k]) for k in x))
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            x, y = np.asarray(x), np.asarray(y)
            return np.array_equal(x, y, equal_nan=x.dtype.kind == "f" and y.dtype.kind == "f")
        return x == y or (isinstance(x, float) and isinstance(y, float) and x != x and y != y)

    return same(dict(a), dict(b))


def _combine(kind: str, old, new):
    if kind == "add":
        return old + new
    if kind in ("max", "min"):
        if isinstance(old, np.ndarray) or isinstance(new, np.ndarray):  # vecs: element-wise
            return np.maximum(old, new) if kind == "max" else np.minimum(old, new)
        return max(old, new) if kind == "max" else min(old, new)
    return new


class DeltaLog:
    """The changes a replica's hooks made to its dynamic State since the last :meth:`take`."""

    def __init__(self, merge: Mapping[str, str]):
        self.merge = dict(merge)  # variable -> add | max | min | none
        self._unpushed: Dict[str, Any] = {}

    def snapshot(self, state: Mapping[str, Any]) -> dict:
        return {v: (dict(state[v]) if isinstance(state[v], dict) else state[v]) for v in self.merge}

    def record(self, before: Mapping[str, Any], state: Mapping[str, Any]) -> None:
        """Add what changed from ``before`` to ``state`` (for ``add``: the difference; else the new value)."""
        for v, kind in self.merge.items():
            old, new = before[v], state[v]
            if isinstance(new, dict):
                pend = None
                for k, x in new.items():
                    prev = old.get(k)
                    if prev is x:
                        continue
                    pend = self._unpushed.setdefault(v, {}) if pend is None else pend
                    d = x - prev if kind == "add" and prev is not None else x
                    pend[k] = pend[k] + d if kind == "add" and k in pend else d
            elif new is not old:
                d = new - old if kind == "add" else new
                self._unpushed[v] = self._unpushed[v] + d if kind == "add" and v in self._unpushed else d

    def peek(self) -> dict:
        """The changes not pushed yet (left in the log)."""
        return self._unpushed

    def take(self) -> dict:
        out, self._unpushed = self._unpushed, {}
        return out

    def __bool__(self) -> bool:
        return bool(self._unpushed)


def merge_into(store: dict, delta: Mapping[str, Any], merge: Mapping[str, str]) -> None:
    """Merge a replica's pushed ``delta`` into the store's State."""
    for v, d in delta.items():
        kind = merge[v]
        if isinstance(d, dict):
            target = store.setdefault(v, {})
            for k, x in d.items():
                target[k] = _combine(kind, target[k], x) if k in target else x
        else:
            store[v] = _combine(kind, store[v], d) if v in store else d
