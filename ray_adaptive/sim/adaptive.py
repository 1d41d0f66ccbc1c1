"""The adaptive controller in the simulator: the runtime's :class:`~ray_adaptive.control.Controller`, fed
with the simulated workload, switching the simulated plan live.

:class:`AdaptiveRun` plugs into :func:`~ray_adaptive.sim.timeline.run_epochs`
as its ``on_epoch``: at the end of an epoch, once ``every_s`` has passed since
the last evaluation, it measures the last ``window_s`` of the run
(:func:`measure_window`: the arrival rate and burstiness of the simulated
arrivals, the mean duration of the tasks that ran), hands the
:class:`~ray_adaptive.control.Measurement` to the controller -- the very one
the runtime uses, looking its estimates up in an
:class:`~ray_adaptive.control.EstimateTable` the compiler computed for the
simulated cluster -- and, on a switch verdict, switches the simulation to
that plan (:meth:`~ray_adaptive.sim.plan_sim.PlanSim.switch`), charging the
switch a pause in which no scheduler works and the controller does not
evaluate. Each switch is recorded (time, from, to, reason, measured rate) in
:attr:`AdaptiveRun.history`, as the runtime's ``rt.history``.

The pause: :data:`SWITCH_PAUSE_S` by default. The runtime's own pause (last
decision under the old plan to the first under the new) is measured by
``release_tests/bench_switch.py``; 0.1 s is of its order on a local cluster
(actors built beside the running ones, a freeze, the State handed over) --
pass the measured one for a given cluster.

The plans a switch may go to are given lowered (``plans``: name ->
:class:`~ray_adaptive.plan.LoweredPlan`): lowering is the compiler's, which
the simulator does not import.

**A cluster that changes size** (node events, :mod:`ray_adaptive.sim.membership`):
each measurement carries the run's size (its member nodes and their
executors). ``sizes(nodes, executors)`` gives the estimate table and the
lowered plans for a size; when the size moves, the controller is given that
size's table (as the runtime's control loop computes one per size) and
judges the plans on it by its usual rules, and a node event puts the plan
in force on the new nodes lowered for their count. The simulator asks for a
size's table when it needs it, at once: the runtime's background compile
takes seconds to minutes, in which its controller keeps the plan in force.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional, Tuple

import numpy as np

from ray_adaptive.control import Controller, EstimateTable, Measurement, Verdict
from ray_adaptive.plan import LoweredPlan

__all__ = ["SWITCH_PAUSE_S", "Switch", "AdaptiveRun", "measure_window"]

SWITCH_PAUSE_S = 0.1  # a switch's pause unless one is given (see the module doc)


@dataclass(frozen=True)
class Switch:
    """One switch of an adaptive simulated run, as the runtime records one in ``rt.history``."""

    time: float
    from_plan: str
    to: str
    reason: str
    rate: float  # the measured offered rate the verdict was taken on (tasks/s)
    pause_s: float
    undecided: int  # tasks handed over undecided
    on_nodes: int  # tasks running or queued on nodes when it switched
    nodes: Optional[int] = None  # the cluster's nodes then (None: not followed)

    def as_dict(self) -> dict:
        return {"time": round(self.time, 6), "from": self.from_plan, "to": self.to, "reason": self.reason,
                "rate": round(self.rate, 1), "pause_s": self.pause_s, "undecided": self.undecided,
                "on_nodes": self.on_nodes, **({"nodes": self.nodes} if self.nodes is not None else {})}


#: A size's estimate table and plans lowered for it: ``sizes(nodes, executors)``.
Sizes = Callable[[int, int], Tuple[EstimateTable, Mapping[str, LoweredPlan]]]


def measure_window(tasks: List, arrivals: np.ndarray, start: float, end: float) -> Optional[Measurement]:
    """What the monitor would report of [``start``, ``end``): the offered rate, the burstiness (CV² of
    the gaps between arrivals; 1 with too few), the mean duration of the tasks that arrived then and
    finished. ``tasks`` sorted by arrival, ``arrivals`` their arrival times. None for an empty window.

    Example:
        >>> from types import SimpleNamespace as T
        >>> ts = [T(arrival=a, status="finished", started_at=a, finished_at=a + 0.02) for a in (0.0, 0.5, 1.0, 1.5)]
        >>> m = measure_window(ts, np.array([t.arrival for t in ts]), 0.0, 2.0)
        >>> m.rate, m.burstiness, round(m.duration_s, 3)
        (2.0, 0.0, 0.02)
    """
    if not end > start:
        return None
    lo, hi = bisect.bisect_left(arrivals, start), bisect.bisect_left(arrivals, end)
    gaps = np.diff(arrivals[lo:hi])
    mean = float(gaps.mean()) if gaps.size >= 2 else 0.0
    burst = float(gaps.var()) / (mean * mean) if mean > 0 else 1.0
    ran = [t.finished_at - t.started_at for t in tasks[lo:hi] if t.status == "finished"]
    return Measurement(time=end, rate=(hi - lo) / (end - start), burstiness=burst,
                       duration_s=float(np.mean(ran)) if ran else None)


class AdaptiveRun:
    """The controller driving a simulation's plan (see the module doc): pass :meth:`on_epoch` to
    :func:`~ray_adaptive.sim.timeline.run_epochs`. Evaluations happen at epoch ends, so an epoch
    should not be longer than the controller's ``every_s``."""

    def __init__(self, sim, controller: Controller, plans: Mapping[str, LoweredPlan],
                 pause_s: float = SWITCH_PAUSE_S, sizes: Optional[Sizes] = None):
        """``sizes``: the table and plans for another size of the cluster (see the module doc); None: the
        size is not followed (a run without node events)."""
        if controller.current != sim.plan.name:
            raise ValueError(f"the controller's plan in force ({controller.current!r}) is not the simulation's "
                             f"({sim.plan.name!r})")
        if isinstance(pause_s, bool) or not (isinstance(pause_s, (int, float)) and 0 <= pause_s < math.inf):
            raise ValueError(f"pause_s must be a number of seconds >= 0, got {pause_s!r}")
        self.sim, self.controller, self.plans, self.pause_s = sim, controller, dict(plans), pause_s
        self._tasks = sorted(sim.tasks, key=lambda t: (t.arrival, t.id))
        self._arrivals = np.array([t.arrival for t in self._tasks], dtype=float)
        self._due = controller.settings.every_s  # the next evaluation (simulated seconds)
        self.history: List[Switch] = []
        self.evaluations: List[Verdict] = []
        self.unswitchable: List[Verdict] = []  # switch verdicts to a plan not given (or that cannot run here)
        self.sizes = sizes
        self._at_event: Optional[tuple] = None  # the switch verdict a node event is carrying out (verdict, m)
        if sizes is not None:
            sim.relower = self._relower  # (a node event: the plan for the new size, see _relower)
            sim.on_resize = self._resized

    def _relower(self, plan: LoweredPlan, nodes: int) -> LoweredPlan:
        """The plan a node event puts in force on the new nodes: the controller evaluates at once on the
        new size's table (the size changed now: no waiting for the next period) and, if it calls for a
        switch, that plan -- one switch, one pause; else the plan in force lowered for the new size."""
        assert self.sizes is not None
        now, s = self.sim.loop.now, self.controller.settings
        m = measure_window(self._tasks, self._arrivals, max(0.0, now - s.window_s), now) \
            if now >= 0.5 * s.window_s else None
        if m is None:
            m = Measurement(time=now, rate=0.0)
        m = self._follow_size(m)
        if m.rate > 0:
            verdict = self.controller.evaluate(m)
            self.evaluations.append(verdict)
            if verdict.switch_to is not None and verdict.switch_to.name in self.plans:
                self._at_event = (verdict, m)
                return self.plans[verdict.switch_to.name]
            if verdict.switch_to is not None:
                self.unswitchable.append(verdict)
        return self.plans.get(plan.name, plan)

    def _resized(self, event: dict) -> None:
        """A node event's switch happened: the controller is told of the plan it put in force."""
        now = event["time"]
        if self._at_event is None:
            self.controller.switched(event["plan"], now, self.sim.resize_pause_s)
            return
        verdict, m = self._at_event
        self._at_event = None
        self.controller.switched(event["plan"], now, self.sim.resize_pause_s)
        self._due = max(self._due, now + self.sim.resize_pause_s)
        self.history.append(Switch(now, event["from"], event["plan"], f"{verdict.reason} (at the node event)",
                                   m.rate, self.sim.resize_pause_s, event["undecided"], event["on_nodes"], m.nodes))

    def _follow_size(self, m: Measurement) -> Measurement:
        """The measurement with the run's size; that size's table and plans in use."""
        if self.sizes is None:
            return m
        nodes, executors = self.sim.size
        m = dataclasses.replace(m, nodes=nodes, executors=executors)
        if not self.controller.table.fits(nodes, executors):
            table, plans = self.sizes(nodes, executors)
            self.controller.use(table)
            self.plans = dict(plans)
        return m

    def on_epoch(self, epoch, sim) -> None:
        """After each epoch: evaluate if one is due, switch if the controller says so."""
        now = epoch.end
        if now + 1e-9 < self._due:
            return
        s = self.controller.settings
        self._due = now + s.every_s
        if now < 0.5 * s.window_s:  # (as the runtime: not yet half a window's worth of measurements)
            return
        m = measure_window(self._tasks, self._arrivals, max(0.0, now - s.window_s), now)
        if m is None:
            return
        m = self._follow_size(m)
        verdict = self.controller.evaluate(m)
        self.evaluations.append(verdict)
        if verdict.switch_to is not None:
            self._switch(verdict, m, now)

    def _switch(self, verdict: Verdict, m: Measurement, now: float) -> None:
        assert verdict.switch_to is not None
        plan = self.plans.get(verdict.switch_to.name)
        if plan is None:
            self.unswitchable.append(verdict)
            return
        info = self.sim.switch(plan, now, self.pause_s)
        self.controller.switched(verdict.switch_to.name, now, self.pause_s)
        self._due = max(self._due, now + self.pause_s)  # (no evaluation during the pause)
        self.history.append(Switch(now, info["from"], info["to"], verdict.reason, m.rate, self.pause_s,
                                   info["undecided"], info["on_nodes"], m.nodes))
