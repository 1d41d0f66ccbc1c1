"""The cluster the compiler estimates for: one record per node, each with its own executors and queue.

:func:`compile_policy`, :func:`estimate_table` and :func:`select_plan` take
either one executors count for every node (``nodes=``, ``executors=``,
``queue=``: a uniform cluster) or ``cluster=``, a sequence with one entry
per node: its executors (an int; its queue is then ``queue=``), or a node
record -- a :class:`~ray_adaptive.workload.specs.NodeSpec`, the runtime's
``NodeState``, or anything with an ``executors`` attribute and optionally
``queue`` and ``resources`` (or a mapping with those keys). Why per node: a
Ray cluster often has a head with 0 CPUs and workers of several kinds; the
execution bound is the sum of every node's executors over the mean task
duration, and the replays must put tasks on nodes of the sizes they have.

A node with 0 executors runs nothing (the runtime never places a task
there): it is left out of the estimates -- of the node count too, so a
decentralized plan has one scheduler per node that runs tasks.

Example:
    >>> [(n.executors, n.queue) for n in cluster_nodes([0, 4, 2], queue=2)]
    [(4, 2), (2, 2)]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

__all__ = ["NodeShape", "ClusterShape", "cluster_nodes", "cluster_shape"]


@dataclass(frozen=True)
class NodeShape:
    """What the compiler reads of one node: executors, queue, resources (None: the compile's default)."""

    executors: int
    queue: int
    resources: Optional[dict] = None


def _entry(x: Any, queue: int, where: str) -> NodeShape:
    if isinstance(x, bool):
        raise TypeError(f"{where}: a node is its executors (an int) or a node record, found {x!r}")
    if isinstance(x, int):
        return NodeShape(x, queue)
    get = (lambda k, d=None: x.get(k, d)) if isinstance(x, Mapping) else (lambda k, d=None: getattr(x, k, d))
    executors = get("executors")
    if isinstance(executors, bool) or not isinstance(executors, int):
        raise TypeError(f"{where}: a node record needs an int 'executors', found {executors!r} in {x!r}")
    q = get("queue", queue)
    if isinstance(q, bool) or not isinstance(q, int):
        raise TypeError(f"{where}: a node's queue must be an int, found {q!r} in {x!r}")
    res = get("resources")
    return NodeShape(executors, q, dict(res) if isinstance(res, Mapping) and res else None)


def cluster_nodes(cluster: Sequence[Any], queue: int = 2) -> tuple[NodeShape, ...]:
    """The nodes of ``cluster`` that run tasks (executors > 0), each with its executors and queue
    (``queue`` for an entry that gives none); an error if none runs tasks or an entry is malformed."""
    if isinstance(cluster, (str, bytes, Mapping)) or not isinstance(cluster, Sequence):
        raise TypeError(f"cluster must be a sequence with one entry per node (its executors, or a node record), "
                        f"found {type(cluster).__name__}")
    shapes = [_entry(x, queue, f"cluster[{i}]") for i, x in enumerate(cluster)]
    bad = [(i, s) for i, s in enumerate(shapes) if s.executors < 0 or s.queue < 0]
    if bad:
        i, s = bad[0]
        raise ValueError(f"cluster[{i}]: executors and queue must be >= 0, found {s.executors} and {s.queue}")
    running = tuple(s for s in shapes if s.executors > 0)
    if not running:
        raise ValueError(f"no node of the cluster runs tasks: every one of the {len(shapes)} has 0 executors; "
                         f"give at least one node executors > 0")
    return running


@dataclass(frozen=True)
class ClusterShape:
    """A cluster as the compiler sees it: per-node executors and queues (nodes that run tasks only)."""

    executors: tuple[int, ...]
    queues: tuple[int, ...]
    resources: tuple[Optional[dict], ...]

    @property
    def nodes(self) -> int:
        return len(self.executors)

    @property
    def total_executors(self) -> int:
        return sum(self.executors)

    @property
    def uniform(self) -> bool:
        return len(set(self.executors)) == 1 and len(set(self.queues)) == 1 and not any(self.resources)

    @property
    def slots(self) -> int:
        return sum(self.executors) + sum(self.queues)

    def describe(self) -> dict:
        """For a plan file or a table's basis: the counts, and the per-node ones when they differ."""
        out: dict = {"nodes": self.nodes, "executors": self.executors[0] if self.uniform else list(self.executors),
                     "queue": self.queues[0] if len(set(self.queues)) == 1 else list(self.queues),
                     "total_executors": self.total_executors}
        return out


def cluster_shape(nodes: int, executors: int, queue: int, cluster: Optional[Sequence[Any]] = None,
                  resources: Optional[dict] = None) -> ClusterShape:
    """``cluster``'s shape (see :func:`cluster_nodes`) or, without one, ``nodes`` nodes of ``executors``
    and ``queue`` each; ``resources``: every node's where an entry gives none."""
    if cluster is None:
        return ClusterShape((executors,) * nodes, (queue,) * nodes, (resources,) * nodes)
    shapes = cluster_nodes(cluster, queue)
    return ClusterShape(tuple(s.executors for s in shapes), tuple(s.queue for s in shapes),
                        tuple(s.resources if s.resources is not None else resources for s in shapes))
