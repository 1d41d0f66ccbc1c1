"""Sampling the competitive ratio while a plan runs: each decision against the ideal one it displaces.

At a decision of the plan, on the exact global state as it takes effect,
``S = Score_ideal(t_impl, n_impl)`` and ``S*`` = the ideal decision's
score (see :func:`~ray_adaptive.sim.metrics.competitive_ratio` for how the
samples are aggregated).

Example: with room for every pending task, and as many decisions made at
once, the ideal places them all and any decision is ideal; with one free
slot, or one decision at a time, ``S*`` is the paper's argmin.

    >>> RatioSampler.mth_best([3.0, 1.0, 2.0], counts=[1, 1, 1], free=1)
    1.0
    >>> RatioSampler.mth_best([3.0, 1.0, 2.0], counts=[1, 1, 1], free=3)
    3.0
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence

from ray_adaptive.dsl.interp import Interpreter
from ray_adaptive.plan.nodeset import NodeSet
from ray_adaptive.plan.queue import PendingQueue

__all__ = ["RatioSampler"]


class RatioSampler:
    """(S, S*) pairs for every ``every``-th decision, on the truth's State and the global pending queue."""

    def __init__(self, truth: Interpreter, scoring, pending: PendingQueue, with_room: Callable[[], NodeSet],
                 free: Callable[[], int], every: int = 1):
        self.truth, self.scoring, self.pending, self._with_room, self._free = truth, scoring, pending, with_room, free
        self.every = every
        self._count = 0
        self.impl: List[float] = []
        self.ideal: List[float] = []
        self.times: List[float] = []  # when each sample was taken

    def __len__(self) -> int:
        return len(self.impl)

    def sample(self, task, node, decided_at: float, now: float, deciders: int = 1 << 30) -> Optional[tuple[float, float]]:
        """(S, S*) for dispatching ``task`` to ``node`` now (None if not sampled).

        The ideal chooses among the tasks that had arrived when the plan
        started deciding (``decided_at``; for a hybrid, when the selector
        picked). Making as many decisions at once as the plan (``deciders``:
        its schedulers holding tasks, each making one), the ideal scheduler
        would now place m = min(#pending, #free slots, deciders) tasks, the
        best first; S* is the score of the m-th of them (each pending task at
        its best node) -- the ideal decision the plan's one displaces. (Free
        slots alone would let a plan that decides too slowly to fill the
        cluster pick any task: the ideal would have placed them all. With as
        many decisions as the plan, a plan that serves the wrong tasks first
        -- a decentralized scheduler its own clients' -- is charged for it.)
        """
        self._count += 1
        if (self._count - 1) % self.every:
            return None
        heads = self.pending.rows(decided_at)
        cands = self._with_room()
        if not heads or not cands:
            return None
        scores = self.scoring.scores(self.truth, heads, cands, now)
        best = self.mth_best(scores.row_min(), [self.pending.count(h, decided_at) for h in heads],
                             min(self._free(), deciders))
        row = self.pending.row_of(task, heads)
        j = cands.position(node) if isinstance(cands, NodeSet) else (cands.index(node) if node in cands else -1)
        if row is not None and j >= 0:
            mine = scores.cell(row, j)
        else:
            mine = self.scoring.pair(self.truth, task, node, now)
        return mine, best

    def record(self, pair: tuple[float, float], now: float) -> None:
        self.impl.append(pair[0])
        self.ideal.append(pair[1])
        self.times.append(now)

    @staticmethod
    def mth_best(best_per_group: Sequence[float], counts: Sequence[int], free: int) -> float:
        """The score of the m-th best pending task, m = min(#pending, ``free`` slots), each group's tasks
        at the group's best score, groups tied in queue order (a stable sort)."""
        m = max(1, min(free, sum(counts)))
        reach = 0
        for g in sorted(range(len(counts)), key=best_per_group.__getitem__):
            reach += counts[g]
            if reach >= m:  # the m-th best task lies in the first group reaching m
                return best_per_group[g]
        raise AssertionError("m exceeds the pending tasks")
