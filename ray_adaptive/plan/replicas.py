"""Replicated State: what a replica's hooks changed since its last push, and merging it.

Shared by the plan simulator's periodic sync and the runtime's state store.

The compiler classifies each State variable hooks change by how replicas
merge (``add`` for ``+=``/``-=`` deltas, ``max``/``min``, ``none``: last
writer wins; see :mod:`ray_adaptive.compiler.units`). A replica's
:class:`DeltaLog` tells its hooks' changes; the state store merges pushed
deltas with :func:`merge_into` and hands the merged State back.

Hooks assign new values (the interpreter never mutates a value in place), so
a changed entry is one whose object identity changed.

Example:
    >>> state = {"alloc": {"a": 1.0}}
    >>> log = DeltaLog({"alloc": "add"}, state)
    >>> state["alloc"] = {"a": 3.0}
    >>> log.take()
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
    """The changes a replica's hooks made to its dynamic State since the last :meth:`take`.

    Computed when asked, against the State as of the last :meth:`take` (or
    :meth:`rebase`): hooks assign new values, never change one in place, so
    an entry changed iff its object is another. (Diffing at the push costs
    once per push, every 10-100 ms, not once per hook.)
    """

    def __init__(self, merge: Mapping[str, str], state: Dict[str, Any]):
        """``state``: the replica's State, the very dict its hooks change."""
        self.merge = dict(merge)  # variable -> add | max | min | none
        self._state = state
        self._base = self._snapshot(state)

    def _snapshot(self, state: Mapping[str, Any]) -> dict:
        return {v: (dict(state[v]) if isinstance(state[v], dict) else state[v]) for v in self.merge}

    def peek(self) -> dict:
        """The changes not pushed yet (for ``add``: the difference; else the new value)."""
        out: Dict[str, Any] = {}
        for v, kind in self.merge.items():
            old, new = self._base[v], self._state[v]
            if isinstance(new, dict):
                changed = {}
                for k, x in new.items():
                    prev = old.get(k)
                    if prev is not x:
                        changed[k] = x - prev if kind == "add" and prev is not None else x
                if changed:
                    out[v] = changed
            elif new is not old:
                out[v] = new - old if kind == "add" else new
        return out

    def take(self) -> dict:
        """:meth:`peek`, and the State now becomes the base of the next changes."""
        out = self.peek()
        self._base = self._snapshot(self._state)
        return out

    def rebase(self, base: Mapping[str, Any]) -> None:
        """The replica's State became ``base`` plus :meth:`peek` (a sync's answer merged in):
        changes are counted from ``base`` from now on."""
        self._base = self._snapshot(base)

    def __bool__(self) -> bool:
        return bool(self.peek())


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
