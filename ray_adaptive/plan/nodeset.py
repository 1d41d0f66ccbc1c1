"""Candidate nodes as positions in a fixed node list, with their loads as one scheduler sees them.

A decision scores (pending rows x candidate nodes). With hundreds of nodes,
building a list of candidates and reading each one's load in Python costs
more than the decision itself; a :class:`NodeSet` is the same sequence of
candidates held as numpy arrays -- the indices of the nodes with room, in
node order (the tie rule), and their loads -- so that a Score whose node
part depends only on the node and its load
(:class:`~ray_adaptive.plan.scoring.SplitScoring`) is evaluated for all of
them at once. It is still a sequence of the node objects, so any scoring
works on it.

Example:
    >>> import numpy as np
    >>> from types import SimpleNamespace as N
    >>> nodes = [N(index=i, load=l) for i, l in enumerate([3, 0, 1])]
    >>> c = NodeSet(nodes, np.array([1, 2]), np.array([0, 1]))
    >>> [n.index for n in c], c.index(nodes[2]), nodes[0] in c
    ([1, 2], 1, False)
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

__all__ = ["NodeSet"]


class NodeSet:
    """``nodes[idx[j]]`` for each ``j``, with ``loads[j]`` its load (``idx`` ascending).

    A sequence (length, items, iteration, ``index``, ``in``), not a :class:`collections.abc.Sequence`:
    schedulers test for it at every decision, and an ABC makes every such test slow."""

    __slots__ = ("nodes", "idx", "loads")

    def __init__(self, nodes: Sequence, idx: np.ndarray, loads: np.ndarray):
        self.nodes, self.idx, self.loads = nodes, idx, loads

    def __len__(self) -> int:
        return len(self.idx)

    def __getitem__(self, j):
        if isinstance(j, slice):
            return [self.nodes[i] for i in self.idx[j]]
        return self.nodes[self.idx[j]]

    def __iter__(self) -> Iterator:
        nodes = self.nodes
        return (nodes[i] for i in self.idx.tolist())

    def position(self, node) -> int:
        """Where ``node`` is in this set, or -1."""
        j = int(np.searchsorted(self.idx, node.index))
        return j if j < len(self.idx) and self.idx[j] == node.index else -1

    def index(self, node, *args) -> int:
        j = self.position(node)
        if j < 0:
            raise ValueError(f"{node!r} is not a candidate")
        return j

    def __contains__(self, node) -> bool:
        return hasattr(node, "index") and self.position(node) >= 0
