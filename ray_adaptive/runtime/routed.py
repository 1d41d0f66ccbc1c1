"""A task as its submitting process routes it, and the process's counts of them.

:class:`RoutedTask` is the submitting process's own record of a task: what
to launch and whom to tell. It is never sent anywhere (it holds the launch
callable, the caller's Future and the ObjectRef); what schedulers see of the
task, and what crosses processes, is its :class:`~ray_adaptive.plan.TaskState`.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ray_adaptive.plan import TaskState

__all__ = ["RoutedTask", "RouterStats", "Launch", "LONG_LIVED"]

#: node id -> the ObjectRef of the task submitted there (its slot resource bound)
Launch = Callable[[str], Any]

#: The first item of the shape of a long-lived task: a policy actor's creation (``("actor", class)``, see
#: ``api.actor_class``), whose duration is the actor's lifetime. The monitor records one while it runs.
LONG_LIVED = "actor"


@dataclass(slots=True)
class RoutedTask:
    """A submitted task in this process, from its submission until it is harvested finished (or settled
    without running: dropped at its deadline, refused by Ray, cancelled)."""

    state: TaskState
    launch: Launch
    shape: Any = None  # tasks of one shape on one node run in submission order (see runtime.harvest)
    future: Optional[Future] = None  # for Router.submit; a .remote() caller reads ref/error
    node: Optional[str] = None
    dispatched_at: float = 0.0
    launched: bool = False  # False if Ray refused the submission
    expired: bool = False  # dropped at its deadline while undecided: still in the scheduler's queue
    ref: Any = None  # its ObjectRef, once launched (a preemptible task's: its resolver's, see runtime.preempt)
    error: Optional[BaseException] = None  # why it never will be (dropped, refused, cancelled)
    run_ref: Any = None  # a preemptible task's current run's ObjectRef (what the harvest watches)
    stopping: bool = False  # a preemption asked to stop its current run

    @property
    def settled(self) -> bool:
        return self.ref is not None or self.error is not None

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.ref

    def explain(self, frozen: bool, ask: Callable[[str], Optional[dict]]) -> dict:
        """Why this task is where it is, as its process sees it: ``frozen``, a live switch is under way;
        ``ask(task id)``, the deciding scheduler's own answer (None: it keeps no record of the task)."""
        tid = self.state.id
        if self.error is not None:
            return {"state": "dropped", "task": tid, "why": str(self.error)}
        if frozen and self.state.node is None:
            return {"state": "pending", "task": tid, "reason": "switching",
                    "why": "the plan is being switched live: it is decided as soon as the next plan is in force"}
        out = ask(tid)
        if out is None:
            where = "launched on " + self.node[:12] if self.node else "decided"
            out = {"state": "placed" if self.state.node else "pending", "task": tid,
                   "why": f"{where}; its decision is no longer in the scheduler's records"}
        return out


@dataclass
class RouterStats:
    submitted: int = 0
    dispatched: int = 0
    finished: int = 0
    dropped: int = 0  # not placed by their deadline: never launched
    dropped_placed_late: int = 0  # of them, placed just before it, the placement seen here after it
    dropped_launched_late: int = 0  # of them, placed in time, their turn to launch here after it
    failed: int = 0  # the policy failed on them (a hook or Score raised: PolicyRuntimeError): never launched
    preempted: int = 0  # runs stopped for a preemption (their tasks waited again)
    harvests: int = 0  # looks for finished tasks (a ray.wait each)
    scans: int = 0  # of them, over every task in flight (the others: over the windows)
    watched: int = 0  # refs those looks were given, in all
