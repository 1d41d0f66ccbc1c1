"""The ideal scheduler: zero decision latency, exact global state.

Every implementation plan is measured against it. At each decision it scores
all (pending task, candidate node) pairs with the policy's Score on the true
state and dispatches the argmin; it repeats until no feasible pair remains.
A policy with ``Preempt`` then lets waiting tasks choose victims, stopped when
their grace ends (the rules: :mod:`ray_adaptive.sim.preemption`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ray_adaptive.dsl.interp import Interpreter, argmin_pair
from ray_adaptive.dsl.ir import Policy
from ray_adaptive.sim.cluster import Cluster
from ray_adaptive.sim.events import FINISH
from ray_adaptive.sim.model import Node, Task
from ray_adaptive.sim.preemption import Nomination, fits_after, nominate, release as _release, victims


@dataclass(frozen=True)
class Decision:
    t: float
    task: str
    node: str
    score: float
    victim: Optional[str] = None  # the task it displaced (a preemption's end), if any

    def as_dict(self) -> dict:
        d = {"t": self.t, "task": self.task, "node": self.node, "score": self.score}
        if self.victim is not None:
            d["victim"] = self.victim
        return d


class IdealScheduler:
    """Pending queue + policy interpreter; decisions one at a time, by the tie rules.

    The pending queue is kept ordered by (arrival, task id) so that the first
    minimum of the score matrix is the tie-broken decision.
    """

    def __init__(self, policy: Policy, cluster: Cluster,
                 on_preempt: Optional[Callable[[Decision], None]] = None):
        """``on_preempt(decision)``: a victim was stopped and the task that displaced it placed (outside
        :meth:`decide`: at the end of the victim's grace); the caller records it and decides again."""
        self.cluster = cluster
        self.interp = Interpreter(policy, num_nodes=len(cluster.nodes))
        self.pending: list[Task] = []
        self._keys: list[tuple] = []
        self.preempts = policy.preempt is not None
        self.on_preempt = on_preempt
        self.preemptions = 0  # victims stopped

    def add(self, task: Task, now: float) -> None:
        key = (task.arrival, task.id)
        i = bisect.bisect_right(self._keys, key)
        self._keys.insert(i, key)
        self.pending.insert(i, task)
        self.interp.run_hook("OnArrival", task, None, now)

    def remove(self, task: Task) -> None:
        i = bisect.bisect_left(self._keys, (task.arrival, task.id))
        del self._keys[i], self.pending[i]
        _release(task)

    def _requeue(self, task: Task) -> None:
        """A preempted task waits again in its old place (its arrival is unchanged; no OnArrival)."""
        key = (task.arrival, task.id)
        i = bisect.bisect_right(self._keys, key)
        self._keys.insert(i, key)
        self.pending.insert(i, task)

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
            _release(task)  # placed elsewhere: its victim, if it had one, is spared
            self.cluster.dispatch(task, node)
            self.interp.run_hook("OnDispatch", task, node, now)
            made.append(Decision(now, task.id, node.id, float(scores[i, j])))
        if self.preempts and self.pending:
            grace = self.interp.policy.preempt.grace
            for nom in nominate(self.interp, self.pending, self.cluster.nodes, now):
                nom.task.nominee, nom.victim.doomed_by = nom.victim, nom.task
                self.cluster.loop.at(now + grace, FINISH, self._stop, nom, nom.victim.run)
        return made

    def could_preempt(self) -> bool:
        """Whether some running task may still become a victim (else rechecking on the clock is pointless)."""
        return bool(victims(self.cluster.nodes, self.interp.policy.preempt.max_preemptions)) if self.preempts else False

    def _stop(self, nom: Nomination, run: int) -> None:
        """The end of a victim's grace: stop it and place the task that chose it (rule 5 of
        :mod:`ray_adaptive.sim.preemption`), unless it finished, or the task was placed or dropped."""
        victim, task, now = nom.victim, nom.task, self.cluster.loop.now
        if victim.doomed_by is not task or victim.run != run or victim.status != "running":
            return
        node = victim.node
        _release(task)
        if task.status != "pending" or not fits_after(node, victim, task):
            return
        self.cluster.stop(victim)
        self.preemptions += 1
        self.interp.run_hook("OnPreempt" if self.interp.policy.hook("OnPreempt") else "OnFinish", victim, node, now)
        self._requeue(victim)
        self.remove(task)
        self.cluster.dispatch(task, node, first=True)
        self.interp.run_hook("OnDispatch", task, node, now)
        if self.on_preempt is not None:
            self.on_preempt(Decision(now, task.id, node.id, nom.score, victim=victim.id))

    def on_leave(self, task: Task, node: Optional[Node], now: float) -> None:
        _release(task)  # a victim that finished within its grace
        self.interp.run_hook("OnFinish", task, node, now)

