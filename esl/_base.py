"""Shared plumbing of the ESLs: names, validation, option merging, node markers."""

from __future__ import annotations

import itertools
import math
import os
import threading
import uuid
from typing import Dict, Iterable, List, Mapping, Optional

from ray_adaptive import resources as _res
from ray_adaptive.errors import ResourceError

# Every resource an ESL creates starts with this prefix, so one scan of the
# cluster state finds (and removes) what an ESL object left behind.
PREFIX = "esl_"
_counter = itertools.count()
# Capacity of "marker" resources that only route tasks (never the limit).
MARKER_CAPACITY = 100_000


def new_prefix(kind: str) -> str:
    """A cluster-unique resource-name prefix for one ESL object."""
    return f"{PREFIX}{kind}_{uuid.uuid4().hex[:10]}_{os.getpid() % 10000}{next(_counter)}"


def check_positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return value


def check_positive_number(name: str, value, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return float(value)


def check_demand(name: str, demand, allow_gpu: bool = True) -> Dict[str, float]:
    """A per-task resource demand such as ``{"CPU": 1}``."""
    if not isinstance(demand, Mapping):
        raise TypeError(f"{name} must be a dict of resource -> amount, got {demand!r}")
    out = {}
    for key, value in demand.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"{name} keys must be resource names, got {key!r}")
        if not allow_gpu and key == "GPU":
            raise ValueError(
                f"{name} asks for GPU, which the raylet cannot resize (unit-instance "
                "resource); reserve GPUs with a Ray placement group instead"
            )
        out[key] = check_positive_number(f"{name}[{key!r}]", value, allow_zero=True)
    return out


def demand_to_options(demand: Mapping[str, float]) -> Dict[str, object]:
    """``{"CPU": 1, "GPU": 1, "x": 2}`` -> ``{"num_cpus": 1, "num_gpus": 1, "resources": {"x": 2}}``."""
    opts: Dict[str, object] = {}
    custom = {}
    for key, value in demand.items():
        if key == "CPU":
            opts["num_cpus"] = value
        elif key == "GPU":
            opts["num_gpus"] = value
        elif key == "memory":
            opts["memory"] = value
        else:
            custom[key] = value
    opts["resources"] = custom
    return opts


def combine(*options: Mapping[str, object]) -> Dict[str, object]:
    """Merge ``.options(...)`` dicts of several ESLs into one (policy composition).

    ``resources`` are summed name by name; every other key must agree (or be
    given by one side only), otherwise ``ValueError`` names the conflict.

    Example::

        opts = esl.combine(lb.options(), colo.group("pair0"))
        f.options(**opts).remote()
    """
    out: Dict[str, object] = {}
    merged: Dict[str, float] = {}
    for opts in options:
        if not isinstance(opts, Mapping):
            raise TypeError(f"combine() takes option dicts, got {opts!r}")
        for key, value in opts.items():
            if key == "resources":
                for name, amount in (value or {}).items():
                    merged[name] = merged.get(name, 0.0) + amount
            elif key in out and out[key] != value:
                raise ValueError(
                    f"cannot combine options: {key!r} is {out[key]!r} in one and {value!r} "
                    "in another"
                )
            else:
                out[key] = value
    out["resources"] = merged
    return out


def free(state: Mapping[str, Mapping[str, Mapping[str, float]]], node: str, name: str) -> float:
    return state.get(node, {}).get(name, {}).get("available", 0.0)


def fits(state, node: str, demand: Mapping[str, float], used: Optional[Mapping[str, float]] = None) -> bool:
    used = used or {}
    return all(free(state, node, k) - used.get(k, 0.0) >= v - 1e-9 for k, v in demand.items() if v > 0)


def release_prefix(prefix: str) -> List[str]:
    """Delete every resource whose name starts with ``prefix`` on every alive node."""
    per_node: Dict[str, Dict[str, float]] = {}
    for node, res in _res.get_cluster_state().items():
        names = {name: 0 for name in res if name.startswith(prefix)}
        if names:
            per_node[node] = names
    for node, names in per_node.items():
        try:
            _res.set_resources(names, node)
        except ResourceError:  # the node died meanwhile: nothing left to free there
            pass
    return sorted(per_node)


class NodeMarkers:
    """One routing resource per node (``<prefix>_n<i>``): ``{marker: 1}`` sends a task there.

    Capacity ``capacity`` per node (default: large, so it only routes; a
    smaller one also caps how many such tasks run on the node at once).
    Created lazily, all nodes in one batch.
    """

    def __init__(self, prefix: str, node_spec=None, capacity: float = MARKER_CAPACITY) -> None:
        self._prefix = prefix
        self._node_spec = {} if node_spec is None else node_spec
        self._capacity = capacity
        self._names: Dict[str, str] = {}
        self._lock = threading.Lock()

    def ensure(self, nodes: Optional[Iterable[str]] = None) -> Dict[str, str]:
        """Create the markers (on ``nodes`` or every node matching node_spec); node -> name."""
        with self._lock:
            wanted = list(nodes) if nodes is not None else None
            if wanted is None:
                if self._names:
                    return dict(self._names)
                wanted = _matching_nodes(self._node_spec)
            missing = [n for n in wanted if n not in self._names]
            for node in missing:
                name = f"{self._prefix}_n{len(self._names)}"
                _res.set_resource(name, self._capacity, node)
                self._names[node] = name
            return dict(self._names)

    def name(self, node: str) -> str:
        return self.ensure([node])[node]

    @property
    def names(self) -> Dict[str, str]:
        return dict(self._names)

    def in_use(self, state) -> Dict[str, float]:
        """node -> units of its marker held right now (tasks running there)."""
        out = {}
        for node, name in self._names.items():
            entry = state.get(node, {}).get(name)
            out[node] = 0.0 if entry is None else entry["total"] - entry["available"]
        return out


def _matching_nodes(node_spec) -> List[str]:
    state = _res.get_cluster_state()
    if isinstance(node_spec, str):
        return [node_spec]
    if isinstance(node_spec, Mapping):
        return [
            n
            for n, r in state.items()
            if all(r.get(k, {}).get("total", 0.0) >= v for k, v in node_spec.items())
        ]
    return list(node_spec)


class Owned:
    """Base: an ESL object owns every resource named ``<prefix>...``; close() removes them."""

    _kind = "esl"

    def __init__(self) -> None:
        self._prefix = new_prefix(self._kind)
        self._lock = threading.RLock()
        self._closed = False

    def close(self) -> None:
        """Remove every resource this object created, on every node (idempotent)."""
        if self._closed:
            return
        self._closed = True
        release_prefix(self._prefix)

    def _check_open(self) -> None:
        if self._closed:
            raise ResourceError(f"this {type(self).__name__} is closed; create a new one")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
