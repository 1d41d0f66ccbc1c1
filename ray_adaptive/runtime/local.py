"""A decentralized plan's scheduler, in the submitting process: decisions where the task is submitted.

Like Ray Serve's caller-side router, a :class:`LocalDecider` decides in the
process that submits the task, on a replica of State synced through the
state store (:class:`~ray_adaptive.runtime.store.StoreClient`), so no actor
sits in the launch path. In a live switch it freezes (its last changes
pushed, its queue handed to the router) and a decider of the next plan
resumes with what it held (see :mod:`ray_adaptive.runtime.switch`).
"""

from __future__ import annotations

import math
import time
from typing import Callable, List, Optional, Sequence

from ray_adaptive.plan import NodeState, RoleSpec, TaskState
from ray_adaptive.plan.explain import explain_pending, explain_placed
from ray_adaptive.runtime.messages import Actor, Handover, Stop, SyncAnswer
from ray_adaptive.runtime.store import StoreClient, ping

__all__ = ["LocalDecider"]


class LocalDecider:
    """Decisions in this process (a decentralized scheduler): a replica of State, synced through the store."""

    remote = False
    thread_safe = False  # the router calls it under its lock
    SYNC_FLOOR_S = 0.01
    # with nothing to tell, a process that synced before still syncs this often: the only way it learns that
    # the store restarted without its share of State and its loads (see StoreClient), which it then pushes
    # again (its tasks may run for hours with nothing waiting here)
    IDLE_SYNC_S = 1.0
    # a group of tasks whose oldest has waited half its deadline's span is served newest first: this process
    # is behind, and what it places oldest first would start after its deadline (see plan.queue). A selector
    # does not need it: it drops what its delivery slack says would arrive late (see runtime.delivery).
    NEWEST_FIRST = 0.5

    def __init__(self, client: str, spec: RoleSpec, nodes: Sequence[NodeState], store: Actor, t0: float, generation: int = 0,
                 records: int = 0):
        self.client = client
        self._t0 = t0
        self._store = store
        self.sched = spec.scheduler(nodes, seed=hash(self.client) & 0xFFFF, records=records,
                                    newest_first=self.NEWEST_FIRST)
        # a store round trip per decision batch ("probe", "store per decision") would put an actor
        # back in the launch path: a submitting process syncs at most every SYNC_FLOOR_S
        self._m = StoreClient(client, spec, self.sched, store, floor_s=self.SYNC_FLOOR_S, generation=generation)
        self._dirty = False  # dispatches and finishes the store has not heard of
        self._pushed_at = time.monotonic()  # when the last sync started
        self.on_decided: Callable[[List[TaskState]], None] = lambda tasks: None  # (decisions come from calls)
        self.on_stop: Callable[[List[Stop]], None] = lambda stops: None  # (never: a decentralized plan never preempts)
        self.queued = False  # tasks wait for the dispatcher thread's next tick (see submit)

    def now(self) -> float:
        return time.time() - self._t0

    def submit(self, tasks: Sequence[TaskState], wait: bool = True) -> List[TaskState]:
        """Decide in this call; or, ``wait`` False (a ``.submit()``: its caller goes on at once), only queue
        them for the dispatcher thread's next tick. Deciding and launching cost this process ~5-10 ms of
        CPU a task on a loaded host: a caller that decides is held up that long per task, so an open-loop
        submitter offered more than that falls behind its own arrivals, its backlog out of reach of any
        deadline (placed, every task then starts late). Queued, its backlog waits where the deadline
        drops what the process cannot launch in time, and the dispatcher decides it in batches."""
        if not wait:
            now = self.now()
            for t in tasks:
                self.sched.add(t, now)
            self.queued = True
            return []
        if len(tasks) == 1:  # (a .remote() or .submit(): decided alone while nothing waits here)
            self._refresh()
            return self._dispatched(self.sched.add_and_decide(tasks[0], self.now()))
        now = self.now()
        for t in tasks:
            self.sched.add(t, now)
        return self.decide()

    def finished(self, ids: Sequence[str]) -> List[TaskState]:
        self.sched.finish_all(ids, self.now())
        self._dirty = self._dirty or bool(ids)
        return self.decide()

    def preempted(self, tasks: Sequence[TaskState]) -> List[TaskState]:
        """Runs a selector asked to stop before a live switch made this plan the one in force: each task
        waits here again (OnPreempt, else OnFinish, where it runs here; a task this scheduler does not
        know runs OnArrival as a new one)."""
        now = self.now()
        for t in tasks:
            if self.sched.vacate(t.id, now) is None:  # (its record here is this process's: vacate marks it)
                t.node, t.run, t.deadline = None, t.run + 1, math.inf
                self.sched.add(t, now)
        self._dirty = self._dirty or bool(tasks)
        return self.decide()

    def _refresh(self) -> None:
        """Apply a sync's answer; start the next one (never waiting for it) while tasks wait here
        or the store has not heard of this process's dispatches or finishes; else every IDLE_SYNC_S."""
        now = time.monotonic()
        want = (bool(self.sched.pending) or self._dirty
                or (self._m.pushes > 0 and now - self._pushed_at >= self.IDLE_SYNC_S))
        pushes = self._m.pushes
        self._m.refresh(want)
        if self._m.pushes != pushes:
            self._dirty, self._pushed_at = False, now

    def decide(self) -> List[TaskState]:
        self._refresh()
        return self._dispatched(self.sched.decide(self.now()))

    def _dispatched(self, decided: List[TaskState]) -> List[TaskState]:
        """Decisions made after this call's sync started: their OnDispatch and loads go with the next one.
        (The last tasks waiting here leave nothing pending: without this, a process's last dispatches
        reached the store only with its next finish -- the others saw those slots free meanwhile, and
        the merged State lacked them while the tasks ran.)"""
        self._dirty = self._dirty or bool(decided)
        self.queued = False
        return decided

    def tick(self) -> List[TaskState]:
        """Called by the dispatcher thread: while tasks wait, a heartbeat may show room that finishes
        elsewhere made; with nothing pending, the store still learns of this process's dispatches and
        finishes (else other processes would keep seeing those slots free, or taken)."""
        self._refresh()
        return self._dispatched(self.sched.decide(self.now())) if self.sched.pending else []

    # -- live switches --------------------------------------------------------
    def freeze(self) -> Handover:
        """Stop deciding: hand this replica's last changes over for the ack to carry (the switch takes the
        merged State next) and the undecided tasks -- their OnArrival is in that State."""
        pending = self.sched.cancel_pending()
        self.queued = False
        return Handover(arrived=pending, pushes=self._m.hand_off())

    def resume(self, running: Sequence[TaskState], arrived: Sequence[TaskState], new: Sequence[TaskState],
               rebuild: bool, seen: Optional[SyncAnswer] = None, finished: Sequence[str] = ()) -> List[TaskState]:
        """Take over what the replaced plan's decider held: the State handed over comes from the store
        (``rebuild``: there was none -- OnDispatch / OnArrival rebuild this process's share), ``seen``
        with the news of the switch, or by a sync (the State published with this plan, the others' loads)."""
        if seen is not None and seen.generation == self._m.generation:
            self._m.start_from(seen)
        else:
            self._m.refresh(want=True, wait=True)
        now = self.now()
        self.sched.adopt(running, dispatch_hooks=rebuild, now=now)
        self.sched.finish_all(finished, now)
        for t in arrived:
            self.sched.add(t, now, arrived=not rebuild)
        for t in new:
            self.sched.add(t, now)
        self._dirty = True
        return self.decide()

    def explain(self, task_id: str) -> Optional[dict]:
        """Why a task of this process is pending here, or its decision record (see :mod:`ray_adaptive.plan.explain`)."""
        return (explain_pending(self.sched, task_id, self.now())
                or explain_placed(self.sched.records or (), task_id))

    def mark_dead(self, node_id: str) -> None:
        n = self.sched.by_id.get(node_id)
        if n is not None:
            n.alive = False

    def node_ids(self) -> List[str]:
        return [n.id for n in self.sched.nodes]

    def decision_latencies(self) -> List[float]:
        return list(self.sched.decision_s)

    def ping(self, record: Callable[[float], None]) -> None:
        """Time an empty call to the actor this process's scheduler talks to (the store); see
        :func:`~ray_adaptive.runtime.store.ping`."""
        ping(self._store, record)

    def store_latencies(self) -> List[float]:
        """Round trips of this process's recent syncs with the state store (seconds)."""
        return list(self._m.sync_s)

    @property
    def pending(self) -> int:
        return self.sched.pending

    def export(self) -> dict:
        return self.sched.export()

    def close(self, switching: bool = False) -> None:
        """This process leaves (the router has waited for its tasks): the State changes of its last
        finishes go to the store before the router unregisters -- else they never would, and its
        tasks' share of State (an allocation) would stay in the merged State for good. No thread to stop.
        ``switching``: a switch's freeze handed its changes off already."""
        if switching:
            return
        try:
            self._m.flush()
        except Exception:  # the store is gone (its runtime shut down): nothing to keep exact
            pass
