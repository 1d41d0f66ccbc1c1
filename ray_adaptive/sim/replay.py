"""Replay a scenario under the ideal scheduler: the reference semantics end to end."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ray_adaptive.dsl.ir import Policy
from ray_adaptive.sim.cluster import Cluster
from ray_adaptive.sim.events import ARRIVAL, DECIDE, TIMEOUT, EventLoop, gc_paused
from ray_adaptive.sim.ideal import Decision, IdealScheduler
from ray_adaptive.sim.model import DEADLINES, Task
from ray_adaptive.sim.preemption import next_recheck
from ray_adaptive.workload.scenario import Scenario, check_fields


@dataclass
class ReplayResult:
    decisions: list[Decision]
    tasks: list[Task]
    state: dict = field(default_factory=dict)  # the policy's State at the end

    def summary(self) -> dict:
        """Counts, goodput and waiting times of the run."""
        tasks = self.tasks
        finished = [t for t in tasks if t.status == "finished"]
        on_time = sum(t.on_time for t in finished)
        end = max((t.finished_at for t in finished), default=0.0)
        start = min((t.arrival for t in tasks), default=0.0)
        waits = np.array([t.started_at - t.arrival for t in finished]) if finished else np.zeros(1)
        span = end - start
        return {
            "tasks": len(tasks),
            "decisions": len(self.decisions),
            "finished": len(finished),
            "on_time": int(on_time),
            "late": len(finished) - int(on_time),
            "dropped": sum(t.status == "dropped" for t in tasks),
            # still waiting at the end: no node could ever take them and they have no timeout
            "pending": sum(t.status == "pending" for t in tasks),
            "makespan_s": round(span, 6),
            "goodput_per_s": round(on_time / span, 3) if span > 0 else 0.0,
            "wait_p50_s": round(float(np.percentile(waits, 50)), 6),
            "wait_p99_s": round(float(np.percentile(waits, 99)), 6),
            **({"preemptions": sum(t.preemptions for t in tasks),
                "wasted_s": round(sum(t.wasted_s for t in tasks), 6)} if any(t.preemptions for t in tasks) else {}),
        }


class Replay:
    """One run of a scenario on the cluster model with the ideal scheduler.

    Example:
        >>> from ray_adaptive.dsl import load_policy
        >>> from ray_adaptive.workload.scenario import scenario_from_dict
        >>> sc = scenario_from_dict({"nodes": [{"id": "n0"}, {"id": "n1"}],
        ...                          "tasks": [{"id": "t0", "arrival": 0.0}]})
        >>> [d.node for d in Replay(load_policy("least_loaded"), sc).run().decisions]
        ['n0']
    """

    def __init__(
        self,
        policy: Policy,
        scenario: Scenario,
        on_decision: Optional[Callable[[Decision], None]] = None,
        source: str = "<scenario>",
        deadline: str = "start",
    ):
        check_fields(policy, scenario, source)
        if deadline not in DEADLINES:
            raise ValueError(f"deadline must be one of {', '.join(DEADLINES)}, found {deadline!r}")
        self.deadline = deadline
        self.loop = EventLoop()
        self.cluster = Cluster(scenario.nodes, self.loop, self._on_leave)
        self.scheduler = IdealScheduler(policy, self.cluster, on_preempt=self._preempted)
        self._recheck_at = math.inf  # the next recheck a policy that preempts has scheduled
        self.tasks = [Task(spec) for spec in scenario.tasks]
        self.decisions: list[Decision] = []
        self.on_decision = on_decision
        self._decide_queued = False
        for task in self.tasks:
            self.loop.at(task.arrival, ARRIVAL, self._arrive, task)
            if math.isfinite(task.spec.timeout):
                self.loop.at(task.spec.deadline, TIMEOUT, self._timeout, task)

    @property
    def state(self) -> dict:
        return self.scheduler.interp.state

    def _request_decision(self) -> None:
        if not self._decide_queued:
            self._decide_queued = True
            self.loop.at(self.loop.now, DECIDE, self._decide)

    def _arrive(self, task: Task) -> None:
        self.scheduler.add(task, self.loop.now)
        self._request_decision()

    def _decide(self) -> None:
        self._decide_queued = False
        for d in self.scheduler.decide(self.loop.now):
            self._record(d)
        if self.scheduler.preempts and self.scheduler.pending and self.scheduler.could_preempt():
            # rule 1 of sim.preemption: decide again soon (only while a victim runs: a run ends)
            at = next_recheck(self.loop.now)
            if at < self._recheck_at or self._recheck_at <= self.loop.now:
                self._recheck_at = at
                self.loop.at(at, DECIDE, self._recheck, at)

    def _recheck(self, at: float) -> None:
        if at == self._recheck_at:
            self._decide()

    def _record(self, d: Decision) -> None:
        self.decisions.append(d)
        if self.on_decision is not None:
            self.on_decision(d)

    def _preempted(self, d: Decision) -> None:
        self._record(d)
        self._request_decision()

    def _on_leave(self, task: Task) -> None:
        self.scheduler.on_leave(task, task.node, self.loop.now)
        self._request_decision()

    def _timeout(self, task: Task) -> None:
        if task.preemptions:
            return  # it started in time; a preemption does not take its result away (sim.preemption, rule 6)
        if task.status == "pending":
            self.scheduler.remove(task)
            task.status = "dropped"
        elif task.status == "queued" and self.deadline == "start":
            self.cluster.drop(task)

    def run(self, until: float = math.inf, every: Optional[float] = None,
            observe: Optional[Callable[[float, "Replay"], None]] = None) -> ReplayResult:
        """Run to the end (or ``until``); call ``observe(t, self)`` every ``every`` seconds."""
        if observe is None or every is None:
            self.loop.run(until)
        else:
            t = 0.0
            while len(self.loop) and t <= until:
                t += every
                self.loop.run(min(t, until))
                observe(t, self)
        return ReplayResult(self.decisions, self.tasks, self.state)


def replay(policy: Policy, scenario: Scenario, **kwargs) -> ReplayResult:
    """Run ``scenario`` under ``policy``'s ideal scheduler and return the result."""
    with gc_paused():  # the set-up too (see gc_paused)
        return Replay(policy, scenario, **kwargs).run()
