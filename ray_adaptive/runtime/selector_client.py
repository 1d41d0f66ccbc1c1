"""A submitting process's side of the selector: tasks in batches, one call in flight, decisions back.

While a call to the selector is in flight, new submissions accumulate; the
next call carries them all, so a loop of submissions costs one round trip
per batch, not per task. Finish notifications go as they are collected (one
call per batch of completions), fire and forget; one that raises is sent
again (a finish is applied once, so a second copy changes nothing).

While this process holds the selector's lease (:mod:`ray_adaptive.runtime.lease`),
the selector's scheduler runs here instead: the whole policy over every
node, so ``.remote()`` decides in the caller's thread, and the client thread
only keeps the long poll through which a recall comes.

**A restarted selector** knows nothing of this process's tasks. Each answer
names the selector's incarnation; when it changes, the next call sends every
task still undecided again, and the tasks decided and not finished as a
``rebuild`` handback (with the nodes seen dead), so the new selector counts
their room and rebuilds State by their OnDispatch. A task is launched once:
only on the first decision for it. A process with tasks running and nothing
to submit would see no answer, so it asks every ``IDLE_CHECK_S`` (an empty
exchange): the running tasks go back within that of the restart, well inside
the restarted selector's quiet time before any lease, and not only when the
process next submits -- until then, their room would be free there.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

import ray

from ray_adaptive.plan import NodeState, RoleSpec, TaskState
from ray_adaptive.runtime.decider import Decided, Stopping
from ray_adaptive.runtime.lease import HeldLease
from ray_adaptive.runtime import background
from ray_adaptive.runtime.messages import Decisions, Handback, Handover, Lease, Recall, Reply, Stop, SyncAnswer
from ray_adaptive.runtime.store import ping

__all__ = ["SelectorClient"]


class SelectorClient:
    """The selector's client in a submitting process (see the module doc): a :class:`~ray_adaptive.runtime.decider.Decider`."""

    thread_safe = True  # locks itself (its client thread shares it)
    IDLE_CHECK_S = 0.25
    IDLE_CHECK_PREEMPTIBLE_S = 0.05  # ... while a preemptible task runs: a stop comes in an answer (see on_stop)
    _FINISHING_KEPT = 64

    def __init__(self, client: str, selector: Any, lease_spec: Optional[RoleSpec], nodes: Sequence[NodeState], t0: float,
                 records: int = 0):
        """``lease_spec``: what this process runs while it holds the selector's lease (None: the selector
        never leases)."""
        self.client = client
        self._records = records
        self._lease_spec = lease_spec
        self._nodes = list(nodes)
        self._node_ids = [n.id for n in nodes]
        self._dead: set = set()
        self._t0 = t0
        self._selector = selector
        self._cond = threading.Condition()
        self._out: List[TaskState] = []
        self._sent: Dict[str, TaskState] = {}  # submitted, not decided yet
        self._running: Dict[str, TaskState] = {}  # decided by the selector (or handed back to it), not finished
        self._incarnation: Optional[str] = None  # of the selector that answered last
        self._resync = False  # the selector restarted: send it what it lost
        self._lease: Optional[HeldLease] = None  # the selector's scheduler, while this process holds its lease
        self._lease_latencies: Deque[float] = deque(maxlen=100_000)  # its decisions' latencies, over every lease
        self._held_finishes: Optional[List[str]] = None  # finishes waiting for a handback to land
        self._held_stops: List[Stop] = []  # ... and runs stopped for a preemption (see preempted)
        # (ref, task ids) of the finish notifications the selector may not have applied yet (ids: none for stops)
        self._finishing: List[Tuple[Any, List[str]]] = []
        self._refinish: List[str] = []  # finishes whose notification raised: sent again (see _finish_failed)
        self._handover: Optional[Handback] = None  # a live switch's: running tasks for the selector of the new plan
        self._freezing = False  # a live switch: stop talking to the selector (see freeze)
        self._parked = False  # the client thread has stopped, no call in flight
        self._closed = False
        self.on_decided: Decided = lambda tasks: None
        self.on_stop: Stopping = lambda stops: None  # runs a policy's Preempt stops (the selector asks in an answer)
        self.exchanges = itertools.count()
        self.leases = 0
        self._thread = threading.Thread(target=self._run, name="ra-selector-client", daemon=True)
        self._thread.start()

    @property
    def remote(self) -> bool:
        """Whether decisions come from the selector actor (else from this process, under a lease)."""
        return self._lease is None

    def now(self) -> float:
        return time.time() - self._t0

    queued = False  # (its submissions never wait for the router's dispatcher thread)

    def submit(self, tasks: Sequence[TaskState], wait: bool = True) -> List[TaskState]:
        """``wait`` is moot: the selector's tasks go out in this client's thread, and a lease decides at once."""
        with self._cond:
            if self._lease is not None:
                return self._lease.submit(tasks, self.now())
            self._out.extend(tasks)
            self._cond.notify()
        return []

    def finished(self, ids: Sequence[str]) -> List[TaskState]:
        if not ids:
            return []
        with self._cond:
            for tid in ids:
                self._running.pop(tid, None)
            if self._lease is not None:
                return self._lease.finished(ids, self.now())
            if self._held_finishes is not None:  # a handback is on its way: these must not overtake it
                self._held_finishes.extend(ids)
                return []
        # its own call, not queued behind the long poll in flight: the room it frees may be
        # exactly what that poll waits for
        self._notify_finished(list(ids))
        return []

    def _notify_finished(self, ids: List[str]) -> None:
        ref = self._selector.finished.remote(ids)
        _if_it_raises(ref, lambda: self._finish_failed(ids))
        with self._cond:  # (kept until done: a live switch waits for them; see freeze)
            self._finishing.append((ref, ids))
            if len(self._finishing) > self._FINISHING_KEPT:  # (those done, dropped in one look)
                self._finishing = _not_done(self._finishing)

    def _finish_failed(self, ids: List[str]) -> None:
        """A finish notification raised (on a thread of Ray's): it may have reached no incarnation, and the
        selector may live on -- its room would stay taken and its OnFinish never run. Sent again by the
        client thread (a finish is applied once: the selector ignores one for a task it does not run, and
        a task finishes once); behind a handback on its way, as any finish."""
        with self._cond:
            if self._closed:
                return
            if self._held_finishes is not None:
                self._held_finishes.extend(ids)
            else:
                self._refinish.extend(ids)
            self._cond.notify()

    def tick(self) -> List[TaskState]:
        return []

    def _run(self) -> None:
        while ray.is_initialized():  # (after ray.shutdown, a call here would start Ray again)
            with self._cond:
                refinish, self._refinish = (self._refinish, []) if not self._freezing else ([], self._refinish)
            if refinish:  # (a freeze sends them itself)
                self._notify_finished(refinish)
                time.sleep(0.05)  # (the last one raised: the selector restarts, or is gone for good)
            with self._cond:
                # (a lease goes back first; and a handover not sent yet goes out: a process that took up its
                # generation late may be told to freeze for the next before this thread looked, and the
                # selector the switch freezes next must hold what the handover carries)
                while self._freezing and self._lease is None and self._handover is None and not self._closed:
                    self._parked = True
                    self._cond.notify_all()
                    self._cond.wait()
                while not (self._out or self._sent or self._lease is not None or self._resync
                           or self._handover or self._freezing or self._refinish) and not self._closed:
                    if not self._running:
                        self._cond.wait()
                    elif not self._cond.wait(self._idle_check_s()):
                        break  # idle with tasks running: is the selector the one that knows them? a stop for one?
                if self._closed:
                    return
                if self._freezing and self._lease is None and self._handover is None:
                    continue
                if self._refinish and not self._freezing:  # (sent first, at the top of the loop)
                    continue
                leased = self._lease is not None
                out, self._out = ([], self._out) if leased else (self._out, [])
                for t in out:
                    self._sent[t.id] = t
                rebuild = None
                sent = self._handover if not leased else None
                handover = sent is not None
                if sent is not None:  # a live switch: what this process holds, and the finishes held for it so far
                    out, rebuild, self._handover = list(self._sent.values()), sent, None
                    if self._held_finishes:
                        rebuild = dataclasses.replace(sent, finished=[*sent.finished, *self._held_finishes])
                        self._held_finishes = []
                elif self._resync and not leased:  # the selector restarted: all it lost of ours, again
                    out = list(self._sent.values())
                    rebuild = Handback(list(self._running.values()), sorted(self._dead), rebuild=True)
                    self._held_finishes = []  # finishes must not overtake the handback
            try:
                answered = False
                try:
                    reply = background.get(self._selector.exchange.remote(self.client, out, rebuild, leased))
                    answered = True
                finally:
                    if rebuild is not None and (answered or not handover):  # (a handover sent again: they wait)
                        self._release_held_finishes()
                next(self.exchanges)
                # recalled, freezing for a switch -- or no longer the holder at all (the selector gave up
                # on us): hand back
                if leased and (self._freezing or not (isinstance(reply, Recall) and not reply.recalled)):
                    reply = self._hand_back()
            except Exception:  # the selector died (it restarts; the next answer says so) or is shut down
                with self._cond:
                    if self._closed:
                        return
                    self._call_failed(rebuild if handover else None)
                time.sleep(0.05)
                continue
            with self._cond:
                if rebuild is not None:
                    self._resync = False
                seen = reply.incarnation if reply is not None else None
                if seen is not None:
                    if self._incarnation is not None and seen != self._incarnation:
                        self._resync = True  # (this answer's decisions still count: the new one made them)
                        self._cond.notify()
                    self._incarnation = seen
            if isinstance(reply, Lease):
                decided = self._take_lease(reply)
            else:
                stray: List[str] = []
                decided = []
                with self._cond:
                    for tid, node in reply.decisions if isinstance(reply, Decisions) else ():
                        got = self._sent.pop(tid, None)
                        if got is None:  # decided already (sent again after a restart): launch it once
                            stray.append(tid)
                            continue
                        got.node = node
                        if node is not None:
                            self._running[tid] = got
                        decided.append(got)
                if stray:  # the room the second decision holds goes back
                    self._notify_finished(stray)
            if decided:
                self.on_decided(decided)
            if isinstance(reply, Decisions) and reply.stop:
                self.on_stop(reply.stop)

    def _idle_check_s(self) -> float:
        """How often an idle client with tasks running asks the selector (under its lock)."""
        return self.IDLE_CHECK_PREEMPTIBLE_S if any(t.preemptible for t in self._running.values()) else self.IDLE_CHECK_S

    def preempted(self, tasks: Sequence[TaskState]) -> List[TaskState]:
        """Runs of these tasks were stopped as the selector asked: each waits at the selector again, and
        its next decision comes as any decision does. (Its own call, as finishes are: the room it frees
        may be what a long poll waits for; held, as they are, while a handback is on its way.)"""
        if not tasks:
            return []
        with self._cond:
            stops = []
            for t in tasks:
                stops.append((t.id, t.run))
                t.node, t.run, t.deadline = None, t.run + 1, math.inf  # (owed its result: no deadline)
                self._running.pop(t.id, None)
                self._sent[t.id] = t  # (its decision comes again: a long poll waits for it)
            self._cond.notify()
            if self._held_finishes is not None:
                self._held_stops += stops
                return []
        self._notify_preempted(stops)
        return []

    def _notify_preempted(self, stops: List[Stop]) -> None:
        ref = self._selector.preempted.remote(stops)
        with self._cond:  # (kept until done, as finishes are: a live switch waits for them)
            self._finishing.append((ref, []))

    def _call_failed(self, handover: Optional[Handback]) -> None:
        """A call to the selector raised: it may have reached no incarnation, or one that died with what it
        was told. Whatever the call carried is sent again (the selector skips what it knows): a live
        switch's handover as it was (``handover``; a restarted selector takes it as a rebuild), else
        everything undecided, with the running tasks as a rebuild handback. The next answer's
        incarnation cannot be relied on to say so: a client that never had an answer -- the first call
        after a switch, to a selector killed before answering -- knows no incarnation to compare with.
        (Under a lease the lease's own hand-back covers it.) The lock is held."""
        if self._lease is not None:
            return
        if handover is not None:  # (the finishes held for it stay held: none may overtake it)
            if self._handover is None:
                self._handover = handover  # (with the finishes it carried)
            else:  # (a later one goes instead: what this one carried goes with it)
                self._held_finishes = [*(self._held_finishes or []), *handover.finished]
        else:
            self._resync = True

    def _take_lease(self, lease: Lease) -> List[TaskState]:
        """Become the selector: its State, this process's tasks back, decided here from now on."""
        assert self._lease_spec is not None  # (a selector that leases was given its spec)
        with self._cond:
            held = HeldLease(self._lease_spec, self._nodes, lease, self._dead, self._lease_latencies, self._records)
            # every undecided task of ours (those sent to an incarnation that died, too; _out: submitted while
            # the lease was on its way), and those running still that an incarnation that died decided
            decided = held.take([*self._sent.values(), *self._out], list(self._running.values()), self.now())
            self._sent, self._out = {}, []
            self._running.clear()
            self._resync = False
            self._lease = held
            self.leases += 1
            return decided

    def _hand_back(self, with_pending: bool = True) -> Optional[Reply]:
        """Recalled: give the selector State, the running tasks and the pending ones, in one call
        (finishes meanwhile are held until it has landed, so none overtakes it). At close, the
        pending tasks stay behind: the router has cancelled them."""
        with self._cond:
            held, self._lease = self._lease, None
            if held is None:
                return None
            pending, handback = held.hand_back(with_pending)
            for t in pending:
                self._sent[t.id] = t
            self._running.update((t.id, t) for t in handback.running)  # the selector's from now on
            self._held_finishes = []
        try:
            return ray.get(self._selector.exchange.remote(self.client, pending, handback))
        finally:
            self._release_held_finishes()

    def _release_held_finishes(self) -> None:
        with self._cond:
            held, self._held_finishes = self._held_finishes, None
            stops, self._held_stops = self._held_stops, []
        if held:
            self._notify_finished(held)
        if stops:
            self._notify_preempted(stops)

    # -- live switches --------------------------------------------------------
    def freeze(self, timeout_s: float = 30.0) -> Handover:
        """Stop talking to the selector -- a lease held here goes back first, a call in flight lands, the
        finish notifications sent have been applied -- and hand the undecided tasks over: those the
        selector has (their OnArrival is in its State) and those it never got."""
        with self._cond:
            self._freezing = True
            self._cond.notify_all()
            in_flight = not (self._parked or self._closed)
        if in_flight:  # a call may be in the selector's long poll: answered now, not at its end
            self._selector.wake.remote(self.client)
        with self._cond:
            self._cond.wait_for(lambda: self._parked or self._closed, timeout=timeout_s)
            finishing, self._finishing = self._finishing, []
            refinish, self._refinish = self._refinish, []
        again, deadline = list(refinish), time.monotonic() + timeout_s
        for ref, ids in finishing:  # (one that raised is sent again: its failure's callback may not have run)
            try:
                ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
            except Exception:
                again += ids
        if again:
            try:
                left = max(0.1, deadline - time.monotonic())
                ray.get(self._selector.finished.remote(sorted(set(again))), timeout=left)
            except Exception:
                pass  # the selector died: the switch finds it restarted, and its successor rebuilds State
        with self._cond:
            return Handover(arrived=list(self._sent.values()), new=list(self._out))

    def resume(self, running: Sequence[TaskState], arrived: Sequence[TaskState], new: Sequence[TaskState],
               rebuild: bool, seen: Optional[SyncAnswer] = None, finished: Sequence[str] = ()) -> List[TaskState]:
        """Hand what the replaced plan's decider held to this selector, with the next exchange: the
        running tasks to count (``rebuild``: their OnDispatch rebuilds its State), the undecided ones.
        (``seen``, the store's State as of the publish, is for deciders that sync with the store.)"""
        with self._cond:
            done = set(finished)
            self._running = {t.id: t for t in running if t.id not in done}
            for t in (*arrived, *new):
                self._sent[t.id] = t
            # (copies: a run stopped meanwhile marks its task waiting, and this is sent as it was)
            # (the finishes held while frozen go with it: the selector frees their room before it decides)
            self._handover = Handback([dataclasses.replace(t) for t in running], sorted(self._dead), rebuild=rebuild,
                                      arrived=[] if rebuild else [t.id for t in arrived], finished=list(finished))
            self._held_finishes = self._held_finishes or []  # finishes must not overtake the handover
            self._cond.notify()
        return []

    def mark_dead(self, node_id: str) -> None:
        with self._cond:
            self._dead.add(node_id)
            if self._lease is not None:
                self._lease.mark_dead(node_id)
        self._selector.mark_dead.remote(node_id)

    def node_ids(self) -> List[str]:
        return list(self._node_ids)

    def explain(self, task_id: str) -> Optional[dict]:
        """Why a task of this process is pending, or its decision record: the selector's answer, or,
        under a lease, this process's own scheduler's (see :mod:`ray_adaptive.plan.explain`)."""
        with self._cond:
            if any(t.id == task_id for t in self._out):
                return {"state": "pending", "task": task_id, "reason": "sending",
                        "why": "submitted, on its way to the selector with the next call"}
            if self._lease is not None:
                return self._lease.explain(task_id, self.now())
        return ray.get(self._selector.explain.remote(task_id), timeout=30)

    def decision_latencies(self) -> List[float]:
        local = self.leased_decision_latencies()
        try:
            return ray.get(self._selector.decision_latencies.remote(), timeout=10) + local
        except Exception:  # the selector is gone (a switch retired it, or shutdown): what this process made
            return local

    def leased_decision_latencies(self) -> List[float]:
        """The latencies of the decisions this process made under the selector's lease, oldest first
        (the selector's own: :meth:`Selector.decision_latencies`); no call to the actor."""
        with self._cond:
            return list(self._lease_latencies)

    def ping(self, record: Callable[[float], None]) -> None:
        """Time an empty call to the selector; see :func:`~ray_adaptive.runtime.store.ping`."""
        ping(self._selector, record)

    def store_latencies(self) -> List[float]:
        return []  # the selector's clients never sync with the store

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._out) + len(self._sent) + (self._lease.pending if self._lease is not None else 0)

    def export(self) -> dict:
        with self._cond:
            out: Dict[str, Any] = {"pending": [t.export() for t in (*self._sent.values(), *self._out)]}
            if self._lease is not None:
                out["lease"] = self._lease.export()
            return out

    def close(self, switching: bool = False) -> None:
        """Stop; a lease goes back to the selector first (other processes may still use it), and the
        selector forgets this process's tasks still pending there (the router has cancelled them).
        ``switching``: a live switch replaced this client's selector: just stop the thread."""
        with self._cond:
            leased = self._lease is not None
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)
        if switching:
            return
        try:
            if leased:
                self._hand_back(with_pending=False)
            ray.get(self._selector.forget.remote(self.client), timeout=5)
        except Exception:
            pass  # the selector is gone (shutdown) or stuck: nothing of ours can be decided there
        with self._cond:
            self._sent.clear()
            self._out.clear()



def _not_done(calls: List[Tuple[Any, List[str]]]) -> List[Tuple[Any, List[str]]]:
    refs = [ref for ref, _ in calls]
    waiting = set(ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)[1])
    return [(ref, ids) for ref, ids in calls if ref in waiting]


def _if_it_raises(ref: Any, then: Callable[[], None]) -> None:
    """Call ``then`` (on a thread of Ray's) if the call whose result is ``ref`` raises."""
    ref.future().add_done_callback(lambda done: then() if done.exception() is not None else None)
