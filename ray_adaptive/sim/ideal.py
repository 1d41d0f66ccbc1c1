"""The ideal scheduler: zero decision latency, exact global state.

Every implementation plan is measured against it. At each decision it scores
all (pending task, candidate node) pairs with the policy's Score on the true
state and dispatches the argmin; it repeats until no feasible pair remains.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ray_adaptive.dsl.interp import Interpreter, argmin_pair
from ray_adaptive.dsl.ir import Policy
from ray_adaptive.sim.cluster import Cluster
from ray_adaptive.sim.model import Node, Task


@dataclass(frozen=True)
class Decision:
    t: float
    task: str
    node: str
    score: float

    def as_dict(self) -> dict:
        return {"t": self.t, "task": self.task, "node": self.node, "score": self.score}


class IdealScheduler:
    """Pending queue + policy interpreter; decisions one at a time, by the tie rules.

    The pending queue is kept ordered by (arrival, task id) so that the first
    minimum of the score matrix is the tie-broken decision.
    """

    def __init__(self, policy: Policy, cluster: Cluster):
        self.cluster = cluster
        self.interp = Interpreter(policy, num_nodes=len(cluster.nodes))
        self.pending: list[Task] = []
        self._keys: list[tuple] = []

    def add(self, task: Task, now: float) -> None:
        key = (task.arrival, task.id)
        i = bisect.bisect_right(self._keys, key)
        self._keys.insert(i, key)
        self.pending.insert(i, task)
        self.interp.run_hook("OnArrival", task, None, now)

    def remove(self, task: Task) -> None:
        i = bisect.bisect_left(self._keys, (task.arrival, task.id))
        del self._keys[i], self.pending[i]

    def decide(self, now: float) -> list[Decision]:
        """Dispatch until no (pending task, candidate node) pair is feasible."""
        made = []
        while self.pending:
            nodes = self.cluster.candidates()
            if not nodes:
                break
            scores = self.interp.score_matrix(self.pending, nodes, now)
            if any(t.spec.resources for t in self.pending):
                fits = np.array([[n.fits(t) for n in nodes] for t in self.pending], dtype=bool)
                scores[~fits] = np.inf
            pick = argmin_pair(scores)
            if pick is None:
                break
            i, j = pick
            task, node = self.pending[i], nodes[j]
            del self.pending[i], self._keys[i]
            self.cluster.dispatch(task, node)
            self.interp.run_hook("OnDispatch", task, node, now)
            made.append(Decision(now, task.id, node.id, float(scores[i, j])))
        return made

    def on_leave(self, task: Task, node: Optional[Node], now: float) -> None:
        self.interp.run_hook("OnFinish", task, node, now)
