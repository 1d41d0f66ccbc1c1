"""The selector actor and its client: one global pending queue for every submitting process.

A centralized plan's one scheduler, and a hybrid's task chooser, run in a
:class:`Selector` actor; each submitting process talks to it through a
:class:`SelectorClient` (tasks and finishes in batches, decisions back;
under a *lease*, the decisions themselves, in the process). The two classes
are the two ends of one protocol -- exchange, lease and recall, handback,
restart -- and are kept in one module so that a change to one end is read
beside the other; that is why this module is longer than most.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
import warnings
from collections import deque
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ray_adaptive.plan import RoleSpec, TaskState
from ray_adaptive.plan.explain import explain_pending, explain_placed
from ray_adaptive.plan.replicas import copy_state
from ray_adaptive.runtime.messages import Decision, Decisions, Handback, Handover, Lease, Recall, Reply
from ray_adaptive.runtime.placement import Forwarder
from ray_adaptive.runtime.store import ping

__all__ = ["Selector", "SelectorClient"]


class Selector:
    """The selector: the global pending queue, exact State, decisions for every submitting process.

    ``exchange(client, tasks)`` adds a client's new tasks and returns the
    decisions made for that client's tasks (waiting up to ``wait_s`` for one while it has tasks pending here:
    a long poll, so an idle client costs nothing and a busy one gets its
    decisions as soon as they are made). With placement schedulers (the
    hybrid), a decision picks the task, and a
    :class:`~ray_adaptive.runtime.placement.Forwarder` sends the tasks on
    and relays their node choices.
    ``finished(ids)`` takes finish notifications, as a separate call so that
    the room they free reaches a long poll in flight.

    **Leases.** A ``.remote()`` loop waits for each decision, so a selector
    reached over an actor call would cost one actor round trip per task. When one client is alone -- nothing pending or running here,
    no other client heard from for ``LEASE_QUIET_S`` -- its exchange is
    answered with a *lease* instead: the exact State, handed over, and its
    tasks back undecided. The client then runs this same scheduler (same
    program, all nodes, the only one with tasks) in its own process, so its
    decisions are exactly the selector's, with no actor in the launch path.
    The holder keeps a long poll here; the first exchange of any other
    client *recalls* the lease, and the holder hands back State, its
    running tasks and its pending ones before anything else is decided.
    A holder silent for ``LEASE_TIMEOUT_S`` after a recall loses the lease
    (its process is presumed dead; State reverts to what it was at the grant,
    and should it hand back after all, its running tasks rebuild their share
    by their OnDispatch, as after a restart).
    A hybrid's selector leases too (``lease=True``, see
    :func:`~ray_adaptive.plan.roles.lease_spec`): the holder runs the whole
    policy, and the running tasks it hands back were placed by no placement
    scheduler; the selector counts them in the loads it sends the placements
    until they finish, so those nodes are seen taken.

    **Restarts.** The selector is restarted when its process dies (the
    topology starts it with ``max_restarts=-1``), with a new
    ``incarnation`` and nothing of the old one's queue, running tasks or
    State. Every answer carries the incarnation: a client that sees it
    change sends its undecided tasks again and, as a handback with
    ``rebuild``, the tasks it launched that run still, whose OnDispatch
    rebuilds State here (see :class:`SelectorClient`).
    A client with tasks running and nothing to submit asks every
    ``IDLE_CHECK_S`` (an empty exchange: nothing of its waits here, so it is
    answered at once), so it hands them back within ``LEASE_QUIET_S`` of
    the restart, before any lease. One that comes later, with a lease out,
    is adopted when the lease comes back, after the holder's State. A
    process holding a lease of the incarnation that died hands it back as
    such a rebuild: its State is not the restarted one's to replace.
    A task already pending or running here is not added twice. A hybrid's
    restarted selector first empties its placement schedulers, which held
    tasks for the old one.

    **Live switches.** A selector of a plan switched to starts without a
    State (``awaiting_state``) and answers no exchange until the switch
    :meth:`install` puts in the one handed over; one switched away from is
    :meth:`freeze` stops it once every process has stopped talking to it, and
    yields its exact State (see :mod:`ray_adaptive.runtime.switch`).
    """

    LEASE_QUIET_S = 1.0
    LEASE_TIMEOUT_S = 5.0

    def __init__(self, spec: RoleSpec, nodes: Sequence[Mapping], placements: Sequence[Tuple[str, str]], t0: float,
                 wait_s: float = 0.05, lease: bool = False, awaiting_state: bool = False, records: int = 0):
        import ray

        self._s = spec.scheduler(nodes, records=records)
        self._t0 = t0
        self._wait_s = wait_s
        self._lease = lease
        self._cond = threading.Condition()
        self._mail: Dict[str, List[Decision]] = {}
        self._waiting: Dict[str, int] = {}  # client -> its tasks not decided yet
        self._seen: Dict[str, float] = {}  # client -> when last heard from (monotonic)
        self._holder: Optional[str] = None  # the client holding the lease
        self._gone: set = set()  # clients that left (see forget)
        self._dead: set = set()  # nodes marked dead
        self._recalled_at: Optional[float] = None
        self._rebuilt: Dict[str, Dict[str, TaskState]] = {}  # client -> running tasks handed back during a lease
        self.leases = 0
        self.decisions = 0
        self._closed = False
        self.incarnation = uuid.uuid4().hex
        with warnings.catch_warnings():  # (Ray reads the actor table through a deprecated API)
            warnings.simplefilter("ignore")
            restarted = ray.get_runtime_context().was_current_actor_reconstructed
        # restarted, it has heard from no client yet: none is alone until all had time to call
        self._lease_from = time.monotonic() + (self.LEASE_QUIET_S if restarted else 0.0)
        self._restarted = restarted
        self._installed = restarted or not awaiting_state  # (restarted: the clients rebuild its State)
        self._frozen = False
        self._fwd: Optional[Forwarder] = None  # the hybrid's placement schedulers
        if placements:
            # (named, not handles: arguments that hold actor handles go to the object store, and a
            # restart needs its arguments still there -- ray-project/ray#53727)
            handles = [ray.get_actor(name, namespace=namespace) for name, namespace in placements]
            self._fwd = Forwarder(handles, self._cond, self._now, self._release, self._mail_to, self._decide)
            self._fwd.start(restarted)

    def _now(self) -> float:
        return time.time() - self._t0

    def finished(self, ids: Sequence[str]) -> None:
        """Finish notifications: free the room, run OnFinish, decide what that allows."""
        with self._cond:
            now = self._now()
            self._release(ids, now)
            self._decide(now)
            self._cond.notify_all()

    def _release(self, ids: Sequence[str], now: float) -> None:
        for tid in ids:
            for waiting in self._rebuilt.values():  # finished before its rebuild could land
                waiting.pop(tid, None)
            if self._s.finish(tid, now) is not None and self._fwd is not None:
                self._fwd.finished(tid)

    def forget(self, client: str) -> None:
        """A client leaves (its router closed): its tasks still pending here are dropped, and decisions
        it will never receive free their room as finishes would -- later ones too (the hybrid's
        placements may still answer for it). Without this, its tasks would be decided for a process
        that is gone and hold their nodes' room for good."""
        with self._cond:
            now = self._now()
            self._s.cancel_pending(lambda t: t.origin == client)
            undelivered = [tid for tid, _ in self._mail.pop(client, [])]
            self._release(undelivered, now)
            self._gone.add(client)
            self._waiting.pop(client, None)
            self._seen.pop(client, None)
            self._decide(now)
            self._cond.notify_all()

    def _mail_to(self, client: str, tid: str, node: Optional[str], now: float) -> bool:
        """Send a decision (node None: dropped at its deadline) to its client; False if the client is
        gone (its room is freed instead)."""
        if client in self._gone:
            self._release([tid], now)
            return False
        self._mail.setdefault(client, []).append((tid, node))
        return True

    def exchange(self, client: str, tasks: Sequence[TaskState], handback: Optional[Handback] = None) -> Reply:
        """A client's new tasks (and running ones it hands over, ``handback``): :class:`Decisions` for
        that client's tasks, a :class:`Lease` (its tasks back, undecided, with State), or, to the
        holder of the lease, a :class:`Recall`."""
        with self._cond:
            if not self._installed:  # (a switch installs the State before any process is told to come)
                self._cond.wait_for(lambda: self._installed or self._closed, timeout=30.0)
            now = self._now()
            self._seen[client] = time.monotonic()
            if handback is not None:
                self._take_back(client, handback)
            if self._holder == client:  # the holder's long poll: answered at a recall
                deadline = time.monotonic() + self._wait_s
                while self._recalled_at is None and not self._closed and time.monotonic() < deadline:
                    self._cond.wait(deadline - time.monotonic())
                return Recall(self._recalled_at is not None, self.incarnation)
            if self._holder is not None:
                self._recall()
            elif handback is None and self._may_lease(client):  # (one giving a lease back is leaving or recalled)
                return self._grant(client, tasks)
            tasks = [t for t in tasks if not self._s.knows(t.id)]  # (sent again after a restart)
            arrived = set(handback.arrived) if handback is not None else ()
            for t in tasks:
                t.origin = client
                self._s.add(t, now, arrived=t.id in arrived)
            self._waiting[client] = self._waiting.get(client, 0) + len(tasks)
            self._decide(now)
            deadline = time.monotonic() + self._wait_s
            while not self._mail.get(client) and self._waiting.get(client) and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            out = self._mail.pop(client, [])
            self._waiting[client] -= len(out)
            return Decisions(out, self.incarnation)

    # ---------------------------------------------------------------- leases
    def _may_lease(self, client: str) -> bool:
        if not self._lease or self._closed or self._s.pending or self._s.running:
            return False
        if time.monotonic() < self._lease_from:
            return False
        quiet = time.monotonic() - self.LEASE_QUIET_S
        return all(seen < quiet for c, seen in self._seen.items() if c != client)

    def _grant(self, client: str, tasks: Sequence[TaskState]) -> Lease:
        self._holder, self._recalled_at = client, None
        self.leases += 1
        return Lease(copy_state(self._s.interp.state), [n.id for n in self._s.nodes if not n.alive], list(tasks),
                     self.incarnation)

    def _recall(self) -> None:
        """Another client wants decisions: ask the holder for the lease back (or take it, if it went silent)."""
        if self._recalled_at is None:
            self._recalled_at = time.monotonic()
            self._cond.notify_all()
        elif time.monotonic() - self._recalled_at > self.LEASE_TIMEOUT_S:
            self._end_lease()

    def _end_lease(self) -> None:
        """The lease is back (or taken back): the tasks rebuilt meanwhile join the State now in force."""
        self._holder, self._recalled_at = None, None
        rebuilt, self._rebuilt = self._rebuilt, {}
        for client, running in rebuilt.items():
            self._adopt(client, list(running.values()), dispatch_hooks=True)

    def _take_back(self, client: str, handback: Handback) -> None:
        """Running tasks decided elsewhere, whose finishes come here from now on: a lease coming
        back, with the holder's State (unless it was taken already: a late holder's State is
        stale by now) -- or, after a restart (``rebuild``), a client's tasks decided by the old
        incarnation, whose OnDispatch rebuilds their share of State. A rebuild that comes while
        a lease is out waits for it to end: the State the holder hands back replaces this one,
        and would drop their share. A lease whose State is not applied -- taken back from a
        silent holder, or granted by an incarnation that died -- comes back as a rebuild too."""
        rebuild = handback.rebuild
        lease_back = handback.state is not None and self._holder == client
        if lease_back and handback.granted_by in (None, self.incarnation):
            self._s.interp.state.update(handback.state)
        elif handback.state is not None:
            rebuild = True
        if lease_back:
            self._end_lease()
        for node_id in handback.dead:
            self._mark_dead(node_id)
        if rebuild and self._holder is not None:
            self._rebuilt.setdefault(client, {}).update((t.id, t) for t in handback.running)  # (exchange recalls it)
        else:
            self._adopt(client, handback.running, dispatch_hooks=rebuild)
        self._cond.notify_all()

    def _adopt(self, client: str, tasks: Sequence[TaskState], dispatch_hooks: bool) -> None:
        running = [t for t in tasks if not self._s.knows(t.id)]
        for t in running:
            t.origin = client
            if self._fwd is not None:  # the hybrid's selector counts them in its pool of every slot
                t.node = self._fwd.adopt(t.id, t.node)
        self._s.adopt(running, dispatch_hooks=dispatch_hooks, now=self._now())

    def _decide(self, now: float) -> None:
        if self._holder is not None or self._frozen:  # (the holder's running tasks are not counted here until
            return                                     # it hands them back; frozen: its State is being handed over)
        chosen = self._s.decide(now)
        if not chosen:
            return
        for t in chosen:
            if t.node is None:  # dropped at its deadline: its client hears, and clears its record
                self._mail_to(t.origin, t.id, None, now)
                continue
            self.decisions += 1
            if self._fwd is not None:  # the hybrid: the node is the placement scheduler's to pick
                self._fwd.forward(t)
            else:
                self._mail_to(t.origin, t.id, t.node, now)
        self._cond.notify_all()

    # ---------------------------------------------------------- live switches
    def install(self, state: Optional[dict]) -> str:
        """The State handed over by the plan this one replaces (None: the initial State; the processes
        rebuild theirs); exchanges are answered from now on. Returns this incarnation."""
        with self._cond:
            if state is not None and not self._installed:
                self._s.interp.state.update(state)
            self._installed = True
            # every process hands its tasks over first: none is alone until all had time to call
            self._lease_from = time.monotonic() + self.LEASE_QUIET_S
            self._cond.notify_all()
            return self.incarnation

    def freeze(self) -> dict:
        """Stop deciding and yield the exact State (every process has stopped talking to this selector).

        A decision no process received (its mail, or a task forwarded to a placement scheduler and
        not placed) is undone as the hybrid undoes one dropped at its deadline: OnFinish runs and its
        room is freed, so the State holds the OnArrival of every task still pending and the
        OnDispatch of every task running. ``exact`` is False when this incarnation cannot know that
        State: it was restarted, or a lease is still out (its holder never handed it back).
        """
        with self._cond:
            self._frozen = True
            if self._fwd is not None:
                self._fwd.freeze()
                self._cond.wait_for(lambda: not self._fwd.in_flight, timeout=10.0)
                undone = self._fwd.unplaced()
            else:
                undone = []
            undone += [tid for mail in self._mail.values() for tid, node in mail if node is not None]
            self._mail.clear()
            now = self._now()
            self._release(undone, now)
            exact = not self._restarted and self._holder is None
            return {"state": copy_state(self._s.interp.state), "exact": exact, "incarnation": self.incarnation,
                    "undone": len(undone)}

    def ping(self) -> None:
        """Nothing: a client times the round trip (the monitor's message latency)."""

    def where(self) -> str:
        """The node this selector runs on."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def explain(self, task_id: str) -> Optional[dict]:
        """Why a task is pending here, or its decision record; for the hybrid, where its placement
        stands (see :mod:`ray_adaptive.plan.explain`)."""
        import ray

        with self._cond:
            out = explain_pending(self._s, task_id, self._now())
            if out is not None or self._fwd is None:
                return out or explain_placed(self._s.records or (), task_id)
            placements = self._fwd.placements()
        for answer in ray.get([p.explain.remote(task_id) for p in placements], timeout=30):
            if answer is not None:
                return answer
        return None

    def mark_dead(self, node_id: str) -> None:
        with self._cond:
            self._mark_dead(node_id)

    def _mark_dead(self, node_id: str) -> None:
        if node_id in self._dead:
            return
        self._dead.add(node_id)
        n = self._s.by_id.get(node_id)  # (the hybrid's selector has only the pool)
        if n is not None:
            n.alive = False
        if self._fwd is not None:
            self._fwd.mark_dead(node_id)

    def stats(self) -> dict:
        with self._cond:
            return {"decisions": self.decisions, "pending": self._s.pending, "leases": self.leases,
                    "live_placements": len(self._fwd.live) if self._fwd is not None else 0, "holder": self._holder,
                    "loads": {n: k for n, k in self._fwd.loads.items() if k} if self._fwd is not None else {}}

    def decision_latencies(self) -> List[float]:
        with self._cond:
            return list(self._s.decision_s)

    def export(self) -> dict:
        """Queues and State (while a lease is out, the holder's process exports the live ones)."""
        with self._cond:
            return {**self._s.export(), "leased_to": self._holder}

    def close(self) -> None:
        with self._cond:
            self._closed = True
            if self._fwd is not None:
                self._fwd.close()
            self._cond.notify_all()


class SelectorClient:
    """A submitting process's side of the selector: decisions by the selector actor, tasks in batches, one call in flight.

    While a call is in flight, new submissions accumulate; the next call
    carries them all, so a loop of submissions costs one round trip per
    batch, not per task. Finish notifications go as they are collected (one
    call per batch of completions), fire and forget.

    While this process holds the selector's lease (see :class:`Selector`),
    ``lease_spec``'s scheduler runs here instead (``local``): the whole
    policy over every node, so ``.remote()`` decides in the caller's thread,
    and the client thread only keeps the long poll through which a recall
    comes. (``lease_spec`` None: the selector never leases.)

    **A restarted selector** knows nothing of this process's tasks. Each
    answer names the selector's incarnation; when it changes, the next call
    sends every task still undecided again, and the tasks decided and not
    finished as a ``rebuild`` handback (with the nodes seen dead), so the
    new selector counts their room and rebuilds State by their OnDispatch.
    A task is launched once: only on the first decision for it. A process
    with tasks running and nothing to submit would see no answer, so it
    asks every ``IDLE_CHECK_S`` (an empty exchange): the running tasks go
    back within that of the restart, well inside the restarted selector's
    ``LEASE_QUIET_S`` (no lease before the handbacks), and not only when
    the process next submits -- until then, their room would be free there.
    """

    thread_safe = True  # locks itself (its client thread shares it)
    IDLE_CHECK_S = 0.25
    _FINISHING_KEPT = 64

    def __init__(self, client: str, selector, lease_spec: Optional[RoleSpec], nodes: Sequence[dict], t0: float,
                 records: int = 0):
        self.client = client
        self._records = records
        self._lease_spec = lease_spec
        self._nodes = list(nodes)
        self._node_ids = [n["id"] for n in nodes]
        self._dead: set = set()
        self._t0 = t0
        self._selector = selector
        self._cond = threading.Condition()
        self._out: List[TaskState] = []
        self._sent: Dict[str, TaskState] = {}  # submitted, not decided yet
        self._running: Dict[str, TaskState] = {}  # decided by the selector (or handed back to it), not finished
        self._incarnation: Optional[str] = None  # of the selector that answered last
        self._resync = False  # the selector restarted: send it what it lost
        self._local = None  # the selector's scheduler, while this process holds its lease
        self._lease_incarnation: Optional[str] = None  # of the selector that granted it
        self._local_latencies: deque = deque(maxlen=100_000)  # its decisions' latencies, over every lease
        self._held_finishes: Optional[List[str]] = None  # finishes waiting for a handback to land
        self._finishing: List = []  # refs of the finish notifications the selector may not have applied yet
        self._handover: Optional[Handback] = None  # a live switch's: running tasks for the selector of the new plan
        self._freezing = False  # a live switch: stop talking to the selector (see freeze)
        self._parked = False  # the client thread has stopped, no call in flight
        self._closed = False
        self.on_decided: Callable[[List[TaskState]], None] = lambda tasks: None
        self.exchanges = itertools.count()
        self.leases = 0
        self._thread = threading.Thread(target=self._run, name="ra-selector-client", daemon=True)
        self._thread.start()

    @property
    def remote(self) -> bool:
        """Whether decisions come from the selector actor (else from this process, under a lease)."""
        return self._local is None

    def now(self) -> float:
        return time.time() - self._t0

    def submit(self, tasks: Sequence[TaskState]) -> List[TaskState]:
        with self._cond:
            if self._local is not None:
                now = self.now()
                if len(tasks) == 1:
                    return self._local.add_and_decide(tasks[0], now)
                for t in tasks:
                    self._local.add(t, now)
                return self._local.decide(now)
            self._out.extend(tasks)
            self._cond.notify()
        return []

    def finished(self, ids: Sequence[str]) -> List[TaskState]:
        if not ids:
            return []
        with self._cond:
            for tid in ids:
                self._running.pop(tid, None)
            if self._local is not None:
                now = self.now()
                self._local.finish_all(ids, now)
                return self._local.decide(now)
            if self._held_finishes is not None:  # a handback is on its way: these must not overtake it
                self._held_finishes.extend(ids)
                return []
        # its own call, not queued behind the long poll in flight: the room it frees may be
        # exactly what that poll waits for
        self._notify_finished(list(ids))
        return []

    def _notify_finished(self, ids: List[str]) -> None:
        ref = self._selector.finished.remote(ids)
        with self._cond:  # (kept until done: a live switch waits for them; see freeze)
            self._finishing.append(ref)
            if len(self._finishing) > self._FINISHING_KEPT:  # (those done, dropped in one look)
                self._finishing = _not_done(self._finishing)

    def tick(self) -> List[TaskState]:
        return []

    def _run(self) -> None:
        import ray

        while ray.is_initialized():  # (after ray.shutdown, a call here would start Ray again)
            with self._cond:
                while self._freezing and self._local is None and not self._closed:  # (a lease goes back first)
                    self._parked = True
                    self._cond.notify_all()
                    self._cond.wait()
                while not (self._out or self._sent or self._local is not None or self._resync
                           or self._handover or self._freezing) and not self._closed:
                    if not self._running:
                        self._cond.wait()
                    elif not self._cond.wait(self.IDLE_CHECK_S):
                        break  # idle with tasks running: is the selector the one that knows them?
                if self._closed:
                    return
                if self._freezing and self._local is None:
                    continue
                leased = self._local is not None
                out, self._out = ([], self._out) if leased else (self._out, [])
                for t in out:
                    self._sent[t.id] = t
                rebuild = None
                if self._handover is not None and not leased:  # a live switch: what this process holds
                    out, rebuild, self._handover = list(self._sent.values()), self._handover, None
                elif self._resync and not leased:  # the selector restarted: all it lost of ours, again
                    out = list(self._sent.values())
                    rebuild = Handback(list(self._running.values()), sorted(self._dead), rebuild=True)
                    self._held_finishes = []  # finishes must not overtake the handback
            try:
                try:
                    reply = ray.get(self._selector.exchange.remote(self.client, out, rebuild))
                finally:
                    if rebuild is not None:
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
                decided, stray = [], []
                with self._cond:
                    for tid, node in reply.decisions if isinstance(reply, Decisions) else ():
                        t = self._sent.pop(tid, None)
                        if t is None:  # decided already (sent again after a restart): launch it once
                            stray.append(tid)
                            continue
                        t.node = node
                        if node is not None:
                            self._running[tid] = t
                        decided.append(t)
                if stray:  # the room the second decision holds goes back
                    self._notify_finished(stray)
            if decided:
                self.on_decided(decided)

    def _take_lease(self, lease: Lease) -> List[TaskState]:
        """Become the selector: its State, this process's tasks back, decided here from now on."""
        with self._cond:
            local = self._lease_spec.scheduler(self._nodes, records=self._records)
            local.decision_s = self._local_latencies
            local.interp.state.update(lease.state)
            for n in local.nodes:
                n.alive = n.id not in self._dead and n.id not in lease.dead
            now = self.now()
            # every undecided task of ours: the selector leases only with nothing pending or
            # running, so none is there (those sent to an incarnation that died, too)
            for t in [*self._sent.values(), *self._out]:  # (_out: submitted while the lease was on its way)
                local.add(t, now)
            self._sent, self._out = {}, []
            # running still, decided by an incarnation that died: their room and State, here now
            local.adopt(list(self._running.values()), dispatch_hooks=True, now=now)
            self._running.clear()
            self._resync = False
            self._local = local
            self._lease_incarnation = lease.incarnation
            self.leases += 1
            return local.decide(now)

    def _hand_back(self, with_pending: bool = True) -> Optional[Reply]:
        """Recalled: give the selector State, the running tasks and the pending ones, in one call
        (finishes meanwhile are held until it has landed, so none overtakes it). At close, the
        pending tasks stay behind: the router has cancelled them."""
        import ray

        with self._cond:
            local, self._local = self._local, None
            if local is None:
                return None
            pending = local.cancel_pending() if with_pending else []
            handback = Handback(local.release_running(), state=copy_state(local.interp.state),
                                granted_by=self._lease_incarnation)
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
        if held:
            self._notify_finished(held)

    # -- live switches --------------------------------------------------------
    def freeze(self, timeout_s: float = 30.0) -> Handover:
        """Stop talking to the selector -- a lease held here goes back first, a call in flight lands, the
        finish notifications sent have been applied -- and hand the undecided tasks over: those the
        selector has (their OnArrival is in its State) and those it never got."""
        import ray

        with self._cond:
            self._freezing = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._parked or self._closed, timeout=timeout_s)
            finishing, self._finishing = self._finishing, []
        try:
            ray.get(finishing, timeout=timeout_s)
        except Exception:
            pass  # the selector died: the switch finds it restarted, and its successor rebuilds State
        with self._cond:
            return Handover(arrived=list(self._sent.values()), new=list(self._out))

    def resume(self, running: Sequence[TaskState], arrived: Sequence[TaskState], new: Sequence[TaskState],
               rebuild: bool, seen: object = None) -> List[TaskState]:
        """Hand what the replaced plan's decider held to this selector, with the next exchange: the
        running tasks to count (``rebuild``: their OnDispatch rebuilds its State), the undecided ones.
        (``seen``, the store's State as of the publish, is for deciders that sync with the store.)"""
        with self._cond:
            self._running = {t.id: t for t in running}
            for t in (*arrived, *new):
                self._sent[t.id] = t
            self._handover = Handback(list(running), sorted(self._dead), rebuild=rebuild,
                                      arrived=[] if rebuild else [t.id for t in arrived])
            self._held_finishes = []  # finishes must not overtake the handover
            self._cond.notify()
        return []

    def mark_dead(self, node_id: str) -> None:
        with self._cond:
            self._dead.add(node_id)
            if self._local is not None:
                self._local.by_id[node_id].alive = False
        self._selector.mark_dead.remote(node_id)

    def node_ids(self) -> List[str]:
        return list(self._node_ids)

    def explain(self, task_id: str) -> Optional[dict]:
        """Why a task of this process is pending, or its decision record: the selector's answer, or,
        under a lease, this process's own scheduler's (see :mod:`ray_adaptive.plan.explain`)."""
        import ray

        with self._cond:
            if any(t.id == task_id for t in self._out):
                return {"state": "pending", "task": task_id, "reason": "sending",
                        "why": "submitted, on its way to the selector with the next call"}
            local = self._local
            if local is not None:
                now = self.now()
                return explain_pending(local, task_id, now) or explain_placed(local.records or (), task_id)
        return ray.get(self._selector.explain.remote(task_id), timeout=30)

    def decision_latencies(self) -> List[float]:
        import ray

        local = self.leased_decision_latencies()
        try:
            return ray.get(self._selector.decision_latencies.remote(), timeout=10) + local
        except Exception:  # the selector is gone (a switch retired it, or shutdown): what this process made
            return local

    def leased_decision_latencies(self) -> List[float]:
        """The latencies of the decisions this process made under the selector's lease, oldest first
        (the selector's own: :meth:`Selector.decision_latencies`); no call to the actor."""
        with self._cond:
            return list(self._local_latencies)

    def ping(self, record: Callable[[float], None]) -> None:
        """Time an empty call to the selector; see :func:`~ray_adaptive.runtime.store.ping`."""
        ping(self._selector, record)

    def store_latencies(self) -> List[float]:
        return []  # the selector's clients never sync with the store

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._out) + len(self._sent) + (self._local.pending if self._local is not None else 0)

    def export(self) -> dict:
        with self._cond:
            out = {"pending": [t.export() for t in (*self._sent.values(), *self._out)]}
            if self._local is not None:
                out["lease"] = self._local.export()
            return out

    def close(self, switching: bool = False) -> None:
        """Stop; a lease goes back to the selector first (other processes may still use it), and the
        selector forgets this process's tasks still pending there (the router has cancelled them).
        ``switching``: a live switch replaced this client's selector: just stop the thread."""
        import ray

        with self._cond:
            leased = self._local is not None
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


def _not_done(refs: List) -> List:
    import ray

    return ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)[1]
