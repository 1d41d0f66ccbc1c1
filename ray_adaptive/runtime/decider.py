"""The extension point where a plan meets a submitting process: the :class:`Decider` a router drives.

Every plan reaches a submitting process as one decider, made by
:meth:`~ray_adaptive.runtime.topology.Topology.decider` from the plan's roles:

* a decentralized plan: :class:`~ray_adaptive.runtime.local.LocalDecider`,
  the whole policy decided in this process on a replica of State;
* a centralized or hybrid plan: :class:`~ray_adaptive.runtime.selector_client.SelectorClient`,
  decisions made by the selector actor (or by this process, while it holds
  the selector's lease).

The router (:mod:`ray_adaptive.runtime.router`) knows a decider through this
protocol alone. Decisions come back two ways: returned by the call that
made them (a decision made in the caller's thread), or later through
``on_decided`` (from the decider's own thread); either way the router
launches each decided task exactly once.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Protocol, Sequence

from ray_adaptive.plan import TaskState
from ray_adaptive.runtime.messages import Handover, Stop, SyncAnswer

__all__ = ["Decider", "Decided"]

#: Where a decider's own thread hands the tasks it decided (the router launches them).
Decided = Callable[[List[TaskState]], None]

#: Where a decider's own thread hands the runs a policy's Preempt stops: (task id, run number) each (the
#: router stops them: see :mod:`ray_adaptive.runtime.preempt`).
Stopping = Callable[[List[Stop]], None]


class Decider(Protocol):
    """A submitting process's way of getting decisions under one generation of a plan.

    ``thread_safe`` False: the router calls every method under its own lock
    (the decider has no thread). True: the decider locks itself, and the
    router never calls it under its lock (a call may wait for an actor).
    Methods that decide return the tasks decided in this call (``node``
    None: dropped at its deadline, never to be launched).
    """

    on_decided: Decided
    on_stop: Stopping

    @property
    def remote(self) -> bool:
        """Whether decisions come from an actor now (a ``.remote()`` caller then waits for a Future)."""
        ...

    @property
    def thread_safe(self) -> bool: ...

    @property
    def pending(self) -> int:
        """Tasks this process submitted that no decision has reached yet."""
        ...

    def now(self) -> float:
        """The runtime's clock (seconds since the runtime began), shared by every process."""
        ...

    @property
    def queued(self) -> bool:
        """Tasks wait for the dispatcher thread's next tick to be decided (``submit(wait=False)``)."""
        ...

    def submit(self, tasks: Sequence[TaskState], wait: bool = True) -> List[TaskState]:
        """Decide the tasks. ``wait`` False: their caller does not wait for the decision (a ``.submit()``);
        a decider may then leave it to the dispatcher thread's next tick (``queued``)."""
        ...

    def finished(self, ids: Sequence[str]) -> List[TaskState]:
        """Tasks of this process left their nodes: their room is free, OnFinish runs where State lives."""
        ...

    def preempted(self, tasks: Sequence[TaskState]) -> List[TaskState]:
        """The current runs of these tasks were stopped for a preemption: their room is free, OnPreempt
        (else OnFinish) runs where State lives, and each waits to be decided again -- marked so here
        (``node`` None, ``run`` its next run's number, no deadline: it is owed its result)."""
        ...

    def tick(self) -> List[TaskState]:
        """The dispatcher thread's period (heartbeats, syncs): whatever that allows is decided."""
        ...

    def mark_dead(self, node_id: str) -> None: ...

    def node_ids(self) -> List[str]: ...

    # -- live switches (see ray_adaptive.runtime.switch) ------------------------------------------
    def freeze(self) -> Handover:
        """Stop deciding and hand over the undecided tasks (State is collected from its authority)."""
        ...

    def resume(self, running: Sequence[TaskState], arrived: Sequence[TaskState], new: Sequence[TaskState],
               rebuild: bool, seen: Optional[SyncAnswer] = None, finished: Sequence[str] = ()) -> List[TaskState]:
        """Take over what the replaced plan's decider held (see :class:`Handover`); ``finished``: tasks of
        ``running`` that finished while the gate was closed, applied as finishes once those are taken and
        before the first decision (their room is often what the undecided tasks wait for)."""
        ...

    def close(self, switching: bool = False) -> None:
        """Stop. ``switching``: a live switch replaced this decider (its actors are retired by the
        switch, not told that this process leaves)."""
        ...

    # -- what operators and the monitor see --------------------------------------------------------
    def explain(self, task_id: str) -> Optional[dict]: ...

    def export(self) -> dict: ...

    def decision_latencies(self) -> List[float]: ...

    def store_latencies(self) -> List[float]: ...

    def ping(self, record: Callable[[float], None]) -> None:
        """Time an empty call to the actor this decider talks to; ``record(seconds)`` when answered."""
        ...
