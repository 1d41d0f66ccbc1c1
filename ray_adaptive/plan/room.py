"""The cluster model's room rule, stated once for the runtime, the simulator and the ideal replay.

A node has ``executors + queue`` slots (:func:`slots_of`); it takes one more
task while the tasks queued and running on it -- its load, what
``get_load(node)`` reads -- are fewer (:func:`has_room`). Every scheduler
applies the rule to the load it sees: the true load (the ideal replay, a
probing scheduler), a heartbeat's (a cached view), or the tasks it sent
plus the others' last reported (:class:`~ray_adaptive.plan.scheduler.NodeState`);
a hybrid's selector applies it to the pool of every slot of the cluster.

:func:`has_room` compares, so it takes numbers or numpy arrays alike: one
node, or every node at once (``np.flatnonzero(has_room(loads, slots))``
lists the nodes with room).

Example:
    >>> import numpy as np
    >>> has_room(2, slots_of(executors=1, queue=2)), has_room(3, slots_of(1, 2))
    (True, False)
    >>> np.flatnonzero(has_room(np.array([3, 0, 2]), np.array([3, 3, 3]))).tolist()
    [1, 2]
"""

from __future__ import annotations

__all__ = ["slots_of", "has_room"]


def slots_of(executors, queue):
    """A node's slots: the tasks it runs at once plus the tasks its queue holds."""
    return executors + queue


def has_room(load, slots):
    """Whether a node with ``load`` tasks queued and running of ``slots`` takes one more (elementwise
    for arrays)."""
    return load < slots
