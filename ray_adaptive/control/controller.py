"""The adaptive controller: keep the plan in force, or switch to another, and why.

One implementation for the runtime (which measures the workload with its
monitor) and the simulator (which measures its simulated workload): both
call :meth:`Controller.evaluate` every ``every_s`` with a
:class:`Measurement` of the last ``window_s``; a lookup in the
:class:`~ray_adaptive.control.table.EstimateTable` gives every plan's
estimates at that load and the compiler's choice there (the *candidate*).

The rules (each setting of :class:`Settings`):

* **Why switch.** The candidate must be better, by the table: the current
  plan's quality breaks the policy's ``[limit]`` (the upper end of its
  ratio's confidence interval is above it) and the candidate's does not
  (``quality``); or the candidate's goodput beats the current's by
  ``margin`` (``goodput``: the current's is what it placed, measured, where
  that falls short of its estimate by more than ``margin``); or, with ``prefer_cheaper``, both carry the
  load within the limit, their goodput is equal within ``margin``, and the
  candidate costs ``margin`` less scheduler time per task (``cheaper``) --
  its per-task latency plus its periodic work (heartbeats, syncs) shared by
  the tasks offered (:meth:`PlanEstimate.cost_s`): at a low rate a plan whose
  every scheduler syncs costs more per task than one selector.
* **Is it worth it.** A switch pauses decisions for ``switch_cost_s``
  (updated with each measured pause) and builds new actors: its gain over
  ``horizon_s`` -- the tasks it delivers more, or the scheduler time it
  saves -- must exceed what the pause delays. A quality switch is always
  worth it.
* **Hysteresis.** ``consecutive`` evaluations in a row that call for a
  switch by the same rule (the switch goes to the latest one's candidate),
  and no switch within ``dwell_s`` of the last one: a rate sitting on a
  boundary does not flap. A goodput switch to a plan that delivers at
  least ``urgent`` times the plan in force's is made on the first
  evaluation that calls for it: the plan in force is past a cliff (a
  decentralized plan above its host bound delivers a fraction of what it
  did), a rate on a boundary gives no such gap, and each evaluation
  waited for leaves the cliff's goodput in force ``every_s`` longer.
* **The cluster's size.** A measurement says how many nodes run tasks and
  their executors. The table must be one for that size (:meth:`EstimateTable.fits`):
  when the cluster grows or shrinks, the controller keeps the plan in force
  until it is given the table for the new size (:meth:`Controller.use`),
  then applies the same rules to it -- the compiler's choice at the new size
  and the measured load -- except agreement: the first evaluation on a new
  size's table may switch without ``consecutive`` evaluations agreeing (a
  size is an exact fact, not a noisy reading; waiting for three readings
  would leave, say, 200 nodes under a selector that decides 450 tasks/s for
  three evaluation periods). Margin, worth-it and dwell stand. A switch to
  the plan in force on new nodes (how the runtime makes nodes join and
  leave) changes no plan: it restarts no dwell.

Example:
    >>> from ray_adaptive.plan import Plan
    >>> from ray_adaptive.control.table import EstimateTable, PlanEstimate
    >>> c, h = Plan("centralized", "centralized"), Plan("hybrid", "hybrid")
    >>> est = {"centralized": PlanEstimate(400, 1.0, 1.0, 2e-3), "hybrid": PlanEstimate(470, 1.0, 1.05, 3e-3)}
    >>> table = EstimateTable("p", 1.2, 12, 510.0, (100.0, 450.0), (1.0,), (c, h),
    ...                       {(0, 0): est, (1, 0): est}, {(0, 0): "centralized", (1, 0): "hybrid"})
    >>> ctl = Controller(table, Settings(consecutive=2, dwell_s=0.0), "centralized")
    >>> [ctl.evaluate(Measurement(t, 450.0)).switch_to for t in (1.0, 2.0)] == [None, h]
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from ray_adaptive.control.table import EstimateTable, PlanEstimate
from ray_adaptive.plan import Plan

__all__ = ["Settings", "Measurement", "Verdict", "Controller"]


@dataclass(frozen=True)
class Settings:
    """The controller's rules (see the module doc), validated when made.

    Example:
        >>> Settings(margin=-1)
        Traceback (most recent call last):
        ...
        ValueError: margin must be a number >= 0 (0.1 is 10%), got -1
    """

    every_s: float = 2.0  # re-evaluate this often
    window_s: float = 5.0  # measure over this much of the recent past
    margin: float = 0.1  # a goodput (or cost) advantage smaller than this is no reason to switch
    consecutive: int = 3  # evaluations in a row that must call for a switch by the same rule
    dwell_s: float = 10.0  # no switch within this long of the last
    switch_cost_s: float = 0.25  # a switch's pause (until one is measured)
    horizon_s: Optional[float] = None  # a switch's gain is counted over this long (default: dwell_s, at least 10 s)
    prefer_cheaper: bool = True  # switch to a plan that costs less to run when goodput is the same
    # a goodput switch to a plan delivering at least this many times the plan in force's needs no agreement:
    # a plan past its cliff (a decentralized plan above its host bound) is no noisy reading, and each
    # evaluation waited for leaves it collapsed another every_s (inf: always wait for ``consecutive``)
    urgent: float = 2.0

    def __post_init__(self):
        for name in ("every_s", "window_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v > 0 and math.isfinite(v)):
                raise ValueError(f"{name} must be a number of seconds > 0, got {v!r}")
        for name in ("margin", "dwell_s", "switch_cost_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0 and math.isfinite(v)):
                hint = " (0.1 is 10%)" if name == "margin" else ""
                raise ValueError(f"{name} must be a number >= 0{hint}, got {v!r}")
        if isinstance(self.consecutive, bool) or not isinstance(self.consecutive, int) or self.consecutive < 1:
            raise ValueError(f"consecutive must be an int >= 1, got {self.consecutive!r}")
        if isinstance(self.urgent, bool) or not isinstance(self.urgent, (int, float)) or not self.urgent > 1:
            raise ValueError(f"urgent must be a number > 1 or inf, got {self.urgent!r}: how many times the plan in "
                             f"force's goodput a switch must bring to need no agreement")
        if self.horizon_s is not None and not (self.horizon_s > 0 and math.isfinite(self.horizon_s)):
            raise ValueError(f"horizon_s must be a number of seconds > 0 or None, got {self.horizon_s!r}")

    @property
    def horizon(self) -> float:
        return self.horizon_s if self.horizon_s is not None else max(self.dwell_s, 10.0)


@dataclass(frozen=True)
class Measurement:
    """The workload over the last window, as the monitor (or the simulator) saw it."""

    time: float  # when it was taken (seconds, the clock the controller is given)
    rate: float  # tasks/s offered
    burstiness: float = 1.0  # squared coefficient of variation of inter-arrival gaps
    duration_s: Optional[float] = None  # mean task duration
    decision_p99_s: Optional[float] = None  # the schedulers' latency
    message_p50_s: Optional[float] = None  # a round trip between the runtime's processes
    nodes: Optional[int] = None  # nodes that run tasks (None: not measured)
    executors: Optional[int] = None  # their executors, summed
    placed: Optional[float] = None  # tasks/s the plan in force placed in time (None: not measured)

    def as_dict(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in self.__dict__.items()
                if v is not None or k not in ("nodes", "executors", "placed")}  # (these only where measured)


@dataclass(frozen=True)
class Verdict:
    """An evaluation's outcome: ``switch_to`` a plan (None: keep; the table's :class:`~ray_adaptive.plan.Plan`,
    ready to run), the reason, and the estimates behind it. Plans are named by ``current`` and ``candidate``
    (the compiler's choice at the measured load)."""

    time: float
    current: str
    switch_to: Optional[Plan]
    reason: str
    candidate: Optional[str] = None
    estimates: dict = field(default_factory=dict)  # plan name -> its estimates and goodput at the measured load
    measured: dict = field(default_factory=dict)  # the measurement evaluated (Measurement.as_dict)


class Controller:
    """Evaluates measurements against an estimate table (see the module doc). Not thread-safe: one caller."""

    def __init__(self, table: EstimateTable, settings: Settings, current: str, now: float = -math.inf):
        table.plan(current)  # (a KeyError naming the plans if it is not in the table)
        self.table = table
        self.settings = settings
        self.current = current
        self._switched_at = now
        self._streak: tuple[Optional[str], int] = (None, 0)
        self.switch_cost_s = settings.switch_cost_s
        self._size = (table.nodes, table.executors)  # the cluster's size when the plan in force was chosen
        self._new_size = False  # the table in use is for a new size, not yet evaluated on

    def use(self, table: EstimateTable) -> None:
        """Evaluate against a refreshed table from now on (one for another size of the cluster: its first
        evaluation needs no agreement, see the module doc)."""
        table.plan(self.current)
        if (table.nodes, table.executors) != (self.table.nodes, self.table.executors):
            self._new_size = True
        self.table = table

    def switched(self, to: str, now: float, pause_s: Optional[float] = None) -> None:
        """A switch happened (decided here, or forced): dwell from now; a measured pause updates the cost.
        A switch to the plan in force (the runtime's way of putting nodes that joined or left in the plan)
        changes no plan: no dwell."""
        if to != self.current:
            self._switched_at = now
            self._size = (self.table.nodes, self.table.executors)
        self.current, self._streak = to, (None, 0)
        if pause_s is not None and pause_s >= 0:
            self.switch_cost_s = 0.5 * self.switch_cost_s + 0.5 * pause_s

    def _why(self, m: Measurement, cur: PlanEstimate, cand: PlanEstimate) -> Optional[tuple[str, str, bool]]:
        """The rule that calls for a switch to ``cand``, the reason to give, and whether it is urgent (see
        ``Settings.urgent``); None: no reason."""
        s, t = self.settings, self.table
        rate, cap, limit = m.rate, t.capacity, t.limit
        current, source = self._current_goodput(m, cur)
        gain = cand.goodput(rate, cap) - current
        pause = rate * self.switch_cost_s  # tasks the pause delays
        if not cur.within(limit) and cand.within(limit):
            return ("quality", f"quality: ratio {cur.ratio_high:.2f} > limit {limit:g}; {cand.ratio_high:.2f} within it",
                    False)
        if not cand.within(limit):
            return None
        if gain > s.margin * max(current, 1e-9) and gain * s.horizon > pause:
            return "goodput", (f"goodput: {cand.goodput(rate, cap):.0f} vs {current:.0f} tasks/s{source} at "
                    f"{rate:.0f} tasks/s offered"), cand.goodput(rate, cap) >= s.urgent * current
        cost, cand_cost = cur.cost_s(rate), cand.cost_s(rate)
        saved = (cost - cand_cost) * rate * s.horizon  # scheduler seconds over the horizon
        if (s.prefer_cheaper and abs(gain) <= s.margin * max(current, 1e-9)
                and cand_cost < (1 - s.margin) * cost and saved > self.switch_cost_s):
            return "cheaper", (f"cheaper: {cand_cost * 1e3:.2f} vs {cost * 1e3:.2f} ms of scheduler time per task "
                    f"(periodic work included) at the same goodput"), False
        return None

    def _current_goodput(self, m: Measurement, cur: PlanEstimate) -> tuple[float, str]:
        """The plan in force's goodput at the measured load, and where it comes from: its estimate -- or
        what it placed, measured, when that is short of the estimate by more than ``margin``. The plan in
        force is the one plan measured, and a model that overrates it (a host that saturates before its
        modelled throughput) must not keep it where the compiler's choice would deliver more."""
        estimated = cur.goodput(m.rate, self.table.capacity)
        if m.placed is not None and m.placed < (1 - self.settings.margin) * estimated:
            return m.placed, f" measured (estimated {estimated:.0f})"
        return estimated, ""

    def evaluate(self, m: Measurement) -> Verdict:
        """Keep the plan in force, or switch (see the module doc)."""
        s = self.settings
        row, choice = self.table.at(m.rate, m.burstiness)
        cap = self.table.capacity
        estimates = {name: {**e.as_dict(), "goodput": round(e.goodput(m.rate, cap), 1)} for name, e in row.items()}
        measured = m.as_dict()

        def keep(reason: str) -> Verdict:
            return Verdict(m.time, self.current, None, reason, choice, estimates, measured)

        t = self.table
        if not t.fits(m.nodes, m.executors):
            self._streak = (None, 0)
            return keep(f"the cluster has {m.nodes} nodes ({m.executors} executors), the estimates in use are for "
                        f"{t.nodes} ({t.executors}): keeping the plan in force until the new size's estimates are in")
        first_at_size, self._new_size = self._new_size, False
        if choice == self.current:
            self._streak = (None, 0)
            return keep(f"the compiler's choice at {m.rate:.0f} tasks/s is the plan in force")
        called = self._why(m, row[self.current], row[choice])
        if called is None:
            self._streak = (None, 0)
            return keep(f"{choice} is the compiler's choice at {m.rate:.0f} tasks/s but not better enough "
                        f"than {self.current} to switch")
        # agreement is on the rule, not the plan: as a ramp's windowed rate rises through the grid the
        # candidate moves between plans that each beat the plan in force for the same reason, and
        # counting from 1 at each move delayed a switch by evaluations that all called for it
        rule, why, urgent = called
        name, count = self._streak
        count = count + 1 if name == rule else 1
        self._streak = (rule, count)
        if m.time - self._switched_at < s.dwell_s:
            return keep(f"{why}; dwelling ({m.time - self._switched_at:.1f} of {s.dwell_s:g} s since the last switch)")
        if count < s.consecutive and not (first_at_size or urgent):
            return keep(f"{why}; {count} of {s.consecutive} evaluations agree")
        if (t.nodes, t.executors) != self._size:  # the size moved since the plan in force was chosen: say so
            why = f"cluster {self._size[0]} -> {t.nodes} nodes; {why}"
        return Verdict(m.time, self.current, self.table.plan(choice), why, choice, estimates, measured)
