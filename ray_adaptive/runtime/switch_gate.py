"""A submitting process's gate for live switches: closed while the plan is replaced, and the pause it cost.

While a switch is under way (see :mod:`ray_adaptive.runtime.switch`) no
decider of this process decides: submissions and finishes wait at the gate,
and the next plan's decider takes them when the gate opens. The gate also
measures what each switch cost this process's callers: the *pause* from its
last decision under the old plan to its first under the new one, and where
that pause went (idle before the freeze, frozen, resumed to the first decision).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Deque, Dict, List, Optional, Sequence, Tuple

from ray_adaptive.plan import TaskState
from ray_adaptive.runtime.deadlines import DeadlineClock
from ray_adaptive.runtime.decider import Decider
from ray_adaptive.runtime.membership import NodeMembership
from ray_adaptive.runtime.messages import Handover, SyncAnswer
from ray_adaptive.runtime.routed import RoutedTask

__all__ = ["SwitchGate"]


class SwitchGate:
    """Closed during a live switch (the router's lock held throughout)."""

    def __init__(self, deadlines: DeadlineClock, membership: NodeMembership) -> None:
        self._deadlines, self._membership = deadlines, membership
        self.frozen = False
        self.held: List[TaskState] = []  # submitted while frozen
        self.held_finished: List[TaskState] = []  # finished while frozen
        self.held_stopped: List[RoutedTask] = []  # runs stopped for a preemption while frozen (still placed)
        self.handover: Optional[Handover] = None  # what the frozen decider handed over
        self.pauses: Deque[Tuple[int, float]] = deque(maxlen=1000)  # (generation, seconds without a decision)
        # ... and where each went: (generation, idle before the freeze, frozen, resumed to first decision,
        # of the frozen part the decider's handing over)
        self.pause_parts: Deque[Tuple[int, float, float, float, float]] = deque(maxlen=1000)
        self._last_launch = 0.0  # (monotonic) the last decision launched: a pause starts there
        self._pause_from: Optional[float] = None
        self._pause_plan = -1  # the generation being replaced: its late decisions do not end the pause
        self._frozen_at = self._handed_at = self._resumed_at = 0.0

    def close(self, generation: int) -> None:
        """A switch away from ``generation`` begins: hold everything from now on."""
        self.frozen = True
        self._frozen_at = time.monotonic()
        self._pause_from = self._last_launch or self._frozen_at
        self._pause_plan = generation

    def hold_finished(self, tasks: Sequence[TaskState]) -> None:
        """Placed tasks that left their nodes (or were never launched) while frozen: the next decider takes
        each as running, then finished -- so each as it was dispatched, its node and fields (OnFinish)."""
        self.held_finished += tasks

    def frozen_with(self, handover: Handover, placed_per_node: Dict[str, int]) -> dict:
        """The frozen decider handed ``handover`` over; what this process holds, for the switch's ack."""
        self.handover = handover
        self._handed_at = time.monotonic()
        return {"pending": len(handover.arrived) + len(handover.new) + len(self.held),
                "running": sum(placed_per_node.values()), "outstanding": placed_per_node,
                **({"pushes": handover.pushes} if handover.pushes is not None else {})}

    def hand_over(self, old: Decider, new: Decider, live: List[RoutedTask], rebuild: bool,
                  seen: Optional[SyncAnswer]) -> List[TaskState]:
        """Open the gate onto ``new``, the next plan's decider: it takes this process's running tasks (and
        the finishes held meanwhile), its undecided ones -- handed over by ``old`` or held here -- and the
        nodes seen dead (see :meth:`~ray_adaptive.runtime.decider.Decider.resume`). Returns what it decides
        at once."""
        mine = {t.state.id for t in live if t.state.node is None}
        handover = self.handover or Handover()
        running = [t.state for t in live if t.state.node is not None] + self.held_finished
        arrived = [t for t in handover.arrived if t.id in mine]
        new_tasks = [t for t in (*handover.new, *self.held) if t.id in mine]
        finished = [t.id for t in self.held_finished]
        self.held, self.held_finished, self.handover = [], [], None
        self._resumed_at = time.monotonic()
        if not (arrived or new_tasks):
            self._pause_from = None  # nothing waited: no pause to measure
        self.frozen = False
        self._deadlines.unreached = 0
        chosen = new.resume(running, arrived, new_tasks, rebuild, seen, finished)
        for n in self._membership.dead:
            new.mark_dead(n)
        return chosen

    def launched(self, plan: int, generation: int, now: float) -> None:
        """Tasks decided by generation ``plan`` (-1: by the replaced plan, landing while frozen) were
        launched at ``now``: the first launch under the new plan ends a pause being measured; a late
        one of the replaced plan moves the pause's start instead."""
        self._last_launch = now
        if self._pause_from is None:
            return
        if plan <= self._pause_plan:
            self._pause_from = now
            return
        start = self._pause_from
        self.pauses.append((generation, now - start))
        self.pause_parts.append((generation, max(0.0, self._frozen_at - start),
                                 self._resumed_at - max(self._frozen_at, start), now - self._resumed_at,
                                 max(0.0, self._handed_at - max(self._frozen_at, start))))
        self._pause_from = None
