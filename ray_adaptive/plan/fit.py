"""Which nodes can run a task at all: its Ray resources against each node's.

The cluster model's room rule (:mod:`ray_adaptive.plan.room`) counts tasks,
not resources: on a cluster of one node kind every task fits every node, and
a decision is Score over the nodes with room. On a mixed cluster a task that
asks for a GPU, more memory or a custom resource must never be placed on a
node that lacks it -- Ray would hold it behind the node's slot forever. A
task's **demand** is the Ray resources it asks for (``num_cpus``,
``num_gpus``, ``memory``, ``resources=``), as a sorted tuple of ``(name,
amount)`` so that tasks of one shape share it; a node *fits* it when its
total resources (not what is free now: that is the room rule's business)
cover every amount. An empty demand fits every node.

A scheduler keeps one boolean mask over its nodes per demand
(:class:`FitMasks`); a decision whose rows all fit every candidate -- the
common case, and every decision on a cluster of one kind -- is made as
before, and only otherwise are the unfit pairs made infeasible
(:func:`masked`).

Example:
    >>> d = demand_of({"num_cpus": 2, "resources": {"TPU": 1}})
    >>> d
    (('CPU', 2.0), ('TPU', 1.0))
    >>> fits({"CPU": 8.0, "TPU": 4.0}, d), fits({"CPU": 8.0}, d), fits({}, ())
    (True, False, True)
"""

from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

__all__ = ["Demand", "demand_of", "fits", "describe", "FitMasks", "masked"]

Demand = Tuple[Tuple[str, float], ...]

#: Ray's defaults for a task's resources: one CPU, nothing else
_TASK_DEFAULTS = {"num_cpus": 1}
_NAMED = (("num_cpus", "CPU"), ("num_gpus", "GPU"), ("memory", "memory"))


def demand_of(options: Mapping[str, Any]) -> Demand:
    """The Ray resources a task with these Ray ``options`` asks for (Ray's task defaults filled in)."""
    merged = {**_TASK_DEFAULTS, **{k: v for k, v in options.items() if v is not None}}
    out: Dict[str, float] = {}
    for option, resource in _NAMED:
        amount = merged.get(option)
        if amount:
            out[resource] = float(amount)
    for name, amount in (merged.get("resources") or {}).items():
        if amount:
            out[str(name)] = float(amount)
    return tuple(sorted(out.items()))


def fits(resources: Mapping[str, float], demand: Demand) -> bool:
    """Whether a node with these total ``resources`` can ever run a task of ``demand``."""
    return all(resources.get(name, 0.0) >= amount for name, amount in demand)


def describe(demand: Demand) -> str:
    """``{'CPU': 1.0, 'GPU': 1.0}``, as a user wrote it."""
    return "{" + ", ".join(f"{name!r}: {amount:g}" for name, amount in demand) + "}"


class FitMasks:
    """Per demand, which of a fixed list of nodes fit it (computed once per demand)."""

    __slots__ = ("_nodes", "_masks")

    def __init__(self, nodes: Sequence):
        self._nodes = nodes
        self._masks: Dict[Demand, Optional[np.ndarray]] = {}

    def of(self, demand: Demand) -> Optional[np.ndarray]:
        """The mask over the nodes (by ``index``) of those fitting ``demand``; None when every node does."""
        if not demand:
            return None
        try:
            return self._masks[demand]
        except KeyError:
            mask = np.array([fits(n.resources, demand) for n in self._nodes], dtype=bool)
            self._masks[demand] = out = None if mask.all() else mask
            return out

    def row_masks(self, rows: Sequence, cands: Sequence) -> Optional[list]:
        """For each row, the mask over ``cands`` of the candidates it fits (None: it fits them all); None
        when every row fits every candidate."""
        out: Optional[list] = None
        for i, t in enumerate(rows):
            mask = self.of(getattr(t, "demand", ()))
            if mask is None:
                continue
            idx = getattr(cands, "idx", None)
            sub = mask[idx] if idx is not None else mask[[c.index for c in cands]]
            if sub.all():
                continue
            if out is None:
                out = [None] * len(rows)
            out[i] = sub
        return out


def masked(scores: Any, rows: int, cols: int, masks: list) -> np.ndarray:
    """The full score matrix of a decision with the pairs whose task does not fit the node made infeasible
    (inf), NaN counting as infeasible too."""
    m = np.array([[scores.cell(i, j) for j in range(cols)] for i in range(rows)], dtype=float)
    m[m != m] = math.inf
    for i, mask in enumerate(masks):
        if mask is not None:
            m[i, ~mask] = math.inf
    return m
