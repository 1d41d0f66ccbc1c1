"""The actors a plan may need: state store, selector, placement schedulers.

Each wraps a :class:`~ray_adaptive.runtime.scheduler.Scheduler` (or, for the
store, merged State and loads) and speaks in batches: one call carries every
task and finish notification that accumulated since the last call, so a
submitting loop never costs one round trip per task.

None of them owns a result: the submitting process launches every task
itself (its ObjectRef stays with the caller), so an actor's death loses
decisions in flight, never results.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
import warnings
from collections import deque
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ray_adaptive.runtime.roles import RoleSpec
from ray_adaptive.runtime.scheduler import POOL, NodeState, Scheduler, TaskState
from ray_adaptive.sim.replicas import copy_state, merge_into, same_state

__all__ = ["StateStore", "Selector", "Placement", "make_scheduler"]

Decision = Tuple[str, str]  # (task id, node id)


def make_scheduler(spec: RoleSpec, nodes: Sequence[Mapping], seed: int = 0) -> Scheduler:
    """A role's scheduler over the cluster's nodes (dicts of :meth:`NodeState.as_dict`)."""
    views = [NodeState.from_dict(n) for n in nodes]
    if spec.pool:
        views = [NodeState(POOL, 0, sum(n.executors for n in views), sum(n.queue for n in views), {})]
    return Scheduler(spec.program, views, hooks=spec.hooks, fifo=spec.fifo, sample_d=spec.sample_d,
                     merge=spec.merge, seed=seed, num_nodes=len(nodes), split=spec.split)


class StateStore:
    """The runtime's registry and the schedulers' meeting point.

    * ``config()``: everything a process needs to join the runtime (policy,
      plan, nodes, slot resources): how ``.remote()`` works from any worker.
    * ``sync(member, delta, outstanding)``: merge a replica's State changes,
      record its outstanding tasks per node (its heartbeat), and return the
      merged State, the *others'* outstanding tasks per node and the
      store's incarnation.

    Restarted when its process dies (``max_restarts=-1``), it starts from
    the initial State with a new incarnation; each member that sees the
    change pushes its whole contribution since it joined, so the merged
    State comes back (see :class:`_Member`).
    """

    def __init__(self, config: dict, state: dict, merge: Optional[Mapping[str, str]]):
        self._config = config
        self._state = copy_state(state)
        self._merge = dict(merge or {})
        self._outstanding: Dict[str, Dict[str, int]] = {}
        self._lock = threading.Lock()
        self.calls = 0
        self.incarnation = uuid.uuid4().hex

    def config(self) -> dict:
        return self._config

    def ping(self) -> None:
        """Nothing: a caller times the round trip (the monitor's message latency)."""

    def sync(self, member: str, delta: Mapping[str, Any], outstanding: Mapping[str, int]) -> tuple:
        with self._lock:
            self.calls += 1
            if delta:
                merge_into(self._state, delta, self._merge)
            self._outstanding[member] = dict(outstanding)
            return {v: self._state[v] for v in self._merge}, self._loads(but=member), self.incarnation

    def _loads(self, but: Optional[str] = None) -> Dict[str, int]:
        """Outstanding tasks per node, over every member but ``but``."""
        loads: Dict[str, int] = {}
        for m, per_node in self._outstanding.items():
            if m != but:
                for node, k in per_node.items():
                    loads[node] = loads.get(node, 0) + k
        return loads

    def leave(self, member: str) -> None:
        with self._lock:
            self._outstanding.pop(member, None)

    def stats(self) -> dict:
        """Sync calls, members, and the outstanding tasks per node the members last reported."""
        with self._lock:
            return {"calls": self.calls, "members": len(self._outstanding), "outstanding": self._loads()}


class _Member:
    """A scheduler that syncs with the store: State deltas and heartbeats of loads.

    Syncing never blocks a decision: :meth:`refresh` pushes this replica's
    changes and loads in a call it does not wait for, and applies the
    store's answer on a later refresh, once it has come. What this replica
    changed meanwhile rides on top of the merged State it gets back.

    A sync that brought no news -- the others' loads came back as the last
    time, and the merged State as the last time plus this replica's own push
    -- doubles the period, up to ``QUIET_S``; any news restores the plan's
    period. A process submitting alone thus syncs ten times a second, not a
    hundred: each sync cost the store actor about 0.6 ms of CPU, 50-57 us
    per task of a lone driver's loop on 2 cores, taken from the workers. A
    process that starts submitting is news to the others at its first sync;
    until their next one (within ``QUIET_S``), it sees their State and loads
    as they last pushed them.

    A member keeps the sum of everything it pushed (``_total``, merged by
    the same rules). When the store's incarnation changes -- it died and
    was restarted from the initial State -- the member keeps its own view
    instead of the store's answer and pushes, at once, all it had pushed
    before the push that answer is for: the merged State is back once
    every member has synced.
    """

    QUIET_S = 0.1  # the longest period between syncs while they bring no news

    def __init__(self, member: str, spec: RoleSpec, sched: Scheduler, store, floor_s: float = 0.0):
        self.member, self.spec, self.sched, self.store = member, spec, sched, store
        self.floor_s = floor_s  # the shortest period between syncs, whatever the plan says
        self._next = 0.0
        self._inflight = None  # Future of the store's answer to the last push
        self._sent: dict = {}  # the State changes of this replica the last push carried
        self._seen: Optional[tuple] = None  # (merged State, others' loads) of the last answer
        self._total: dict = {}  # every State change this replica pushed, merged
        self._before: dict = {}  # _total before the last push
        self._incarnation: Optional[str] = None  # the store's, at the last answer
        self._repush: Optional[dict] = None  # the store restarted: what it lacks of ours, for the next push
        self.pushes = 0
        self.sync_s: deque = deque(maxlen=10_000)  # round trips of the recent syncs (seconds)
        # one call carries both the others' loads (every heartbeat_s) and State (every sync_s, if
        # replicated): the shorter period; 0 is before every decision batch (exact loads, or a
        # State synced per decision)
        periods = [spec.heartbeat_s] + ([spec.sync_s] if spec.merge else [])
        self._base = max(min(periods), floor_s)
        self._period = self._base

    def due(self) -> bool:
        return self.store is not None and self._inflight is None and time.monotonic() >= self._next

    @property
    def owes(self) -> bool:
        """A restarted store lacks this replica's pushes: the next refresh pushes, wanted or not."""
        return self._repush is not None

    def refresh(self, want: bool = True, wait: bool = False) -> None:
        """Apply the store's answer if it has come; start the next sync if ``want`` and one is due;
        with ``wait``, wait for that answer too (a placement actor, off the launch path, decides on
        fresh loads)."""
        if self._inflight is not None:
            if not self._inflight.done():
                return
            self._apply()
        if (want or self.owes) and self.due():
            log = self.sched.log
            delta = log.take() if log is not None else {}
            self._before = copy_state(self._total)
            merge_into(self._total, delta, self.spec.merge)
            if self._repush is not None:  # a restarted store has none of what came before its answer
                merge_into(self._repush, delta, self.spec.merge)
                delta, self._repush = self._repush, None
            self._sent = delta
            sent = time.perf_counter()
            self._inflight = self.store.sync.remote(self.member, delta, self.sched.outstanding()).future()
            # timed when the answer lands (on Ray's thread), not when a later refresh applies it
            self._inflight.add_done_callback(lambda _f: self.sync_s.append(time.perf_counter() - sent))
            self._next = time.monotonic() + self._period
            self.pushes += 1
            if wait:
                self._apply()

    def _apply(self) -> None:
        answer, self._inflight = self._inflight, None
        try:
            state, others, incarnation = answer.result()
        except Exception:  # the store died (it restarts: a later answer says so) or is shut down
            return
        restarted = self._incarnation not in (None, incarnation)
        self._incarnation = incarnation
        if restarted:  # it merged our last push only: keep our view, push all before it at once
            self._repush, self._next, self._seen = copy_state(self._before), 0.0, None
            self.sched.set_others(others)
            return
        if self._seen is None or others != self._seen[1]:
            news = True
        else:  # the others pushed no State change: the store merged this replica's push only
            expected = copy_state(self._seen[0])
            merge_into(expected, self._sent, self.spec.merge)
            news = not same_state(state, expected)
        if news:
            self._period = self._base
        elif self._base > 0:  # (a member syncing before every batch keeps doing so: the plan's choice)
            self._period = min(2 * self._period, max(self.QUIET_S, self._base))
        self._seen = (state, others)
        log = self.sched.log
        if log is not None:
            merged = copy_state(state)
            merge_into(merged, log.peek(), self.spec.merge)  # this replica's changes since the push
            self.sched.interp.state.update(merged)
            log.rebase(state)  # (those changes are still to push)
        self.sched.set_others(others)

    def report(self) -> None:
        """After dispatching or finishing: tell the store this scheduler's loads at once (fire and
        forget). Without it a scheduler with nothing pending never syncs, and the others would
        wait forever for room its finished tasks freed."""
        if self.store is not None:
            self.store.sync.remote(self.member, {}, self.sched.outstanding())


class Placement:
    """A hybrid's placement scheduler, pinned to a node: places forwarded tasks by the node part of Score.

    The loads it decides on come with each call: every placement's decision
    and every finish passes through the selector, so the selector counts
    what runs where, exactly, and sends that count with the batch (with a
    cached load view, taken only once per ``heartbeat_s``). No store round
    trip sits in the launch path; the store only merges State, for a plan
    whose placements keep a replica of it.
    """

    def __init__(self, index: int, spec: RoleSpec, nodes: Sequence[Mapping], store, t0: float):
        import ray

        self.node_id = ray.get_runtime_context().get_node_id()
        self._t0 = t0
        self._args = (index, spec, nodes, store)
        self.reset()

    def reset(self) -> None:
        """Forget every task (a restarted selector: its clients send theirs again)."""
        index, spec, nodes, store = self._args
        self._spec = spec
        self._s = make_scheduler(spec, nodes, seed=index)
        self._m = _Member(f"placement-{index}", spec, self._s, store) if spec.merge else None
        self._next_loads = 0.0  # (cached view) when the next count of loads is taken

    def where(self) -> str:
        return self.node_id

    def place(self, forwarded: Sequence[TaskState], finished: Sequence[str], loads: Mapping[str, int]) -> List[Decision]:
        """Finish notifications, then new tasks, then decisions (also for tasks held from earlier calls).
        ``loads``: every task placed and not finished per node, as the selector counted them when it
        sent ``finished`` (so this scheduler's own tasks in it are exactly the ones it still counts)."""
        s, now = self._s, time.time() - self._t0
        for tid in finished:
            s.finish(tid, now)
        for t in forwarded:
            s.add(t, now)
        if self._m is not None:
            self._m.refresh(want=bool(s.pending), wait=True)
        if time.monotonic() >= self._next_loads:
            own = s.outstanding()
            s.set_others({n: k - own.get(n, 0) for n, k in loads.items()})
            self._next_loads = time.monotonic() + self._spec.heartbeat_s
        decided = s.decide(now)
        if self._m is not None and (decided or finished):
            self._m.report()
        return [(t.id, t.node) for t in decided]

    def mark_dead(self, node_id: str) -> None:
        n = self._s.by_id.get(node_id)
        if n is not None:
            n.alive = False

    def export(self) -> dict:
        return self._s.export()


class Selector:
    """The selector: the global pending queue, exact State, decisions for every submitting process.

    ``exchange(client, tasks)`` adds a client's new tasks and returns the
    decisions made for that client's tasks (waiting up to ``wait_s`` for one while it has tasks pending here:
    a long poll, so an idle client costs nothing and a busy one gets its
    decisions as soon as they are made). With placement schedulers (the
    hybrid), a decision picks the task; a forwarding thread sends the tasks
    decided since its last round, as one batch, to the next placement
    scheduler (round-robin by batch, where the simulator deals single tasks:
    dealt one by one, 12 placements got batches of one task and a call each,
    and the hybrid served 20-80 tasks/s on 12 nodes here, 95-125 by batch),
    and relays their node choices.
    ``finished(ids)`` takes finish notifications, as a separate call so that
    the room they free reaches a long poll in flight.

    **Leases.** A ``.remote()`` loop waits for each decision, so a selector
    reached over an actor call would cost one round trip (~1-1.5 ms here)
    per task. When one client is alone -- nothing pending or running here,
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
    :func:`~ray_adaptive.runtime.roles.lease_spec`): the holder runs the whole
    policy, and the running tasks it hands back were placed by no placement
    scheduler; the selector counts them in the loads it sends the placements
    until they finish, so those nodes are seen taken.

    **Restarts.** The selector is restarted when its process dies (the
    topology starts it with ``max_restarts=-1``), with a new
    ``incarnation`` and nothing of the old one's queue, running tasks or
    State. Every answer carries the incarnation: a client that sees it
    change sends its undecided tasks again and, as a handback with
    ``rebuild``, the tasks it launched that run still, whose OnDispatch
    rebuilds State here (see :class:`~ray_adaptive.runtime.topology.RemoteDecider`).
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
    """

    LEASE_QUIET_S = 1.0
    LEASE_TIMEOUT_S = 5.0

    def __init__(self, spec: RoleSpec, nodes: Sequence[Mapping], placements: Sequence[Tuple[str, str]], t0: float,
                 wait_s: float = 0.05, lease: bool = False):
        self._s = make_scheduler(spec, nodes)
        self._t0 = t0
        self._wait_s = wait_s
        self._lease = lease
        import ray

        # (named, not handles: arguments that hold actor handles go to the object store, and a
        # restart needs its arguments still there -- ray-project/ray#53727)
        self._placements = [ray.get_actor(name, namespace=namespace) for name, namespace in placements]
        self._adopted: Dict[str, str] = {}  # (hybrid) handed-back running task -> its node
        self._placed: Dict[str, str] = {}  # (hybrid) task a placement scheduler placed, not finished -> its node
        self._loads: Dict[str, int] = {}  # (hybrid) per node: the placed and the adopted tasks (see Placement)
        self._cond = threading.Condition()
        self._mail: Dict[str, List[Decision]] = {}
        self._waiting: Dict[str, int] = {}  # client -> its tasks not decided yet
        self._origin: Dict[str, str] = {}  # forwarded task -> client
        self._hop: Dict[str, int] = {}  # forwarded task -> placement index
        self._out: List[List[TaskState]] = [[] for _ in self._placements]
        self._fin: List[List[str]] = [[] for _ in self._placements]
        self._batch_to = 0  # the placement scheduler that gets the tasks decided until the next forwarding round
        self._live = set(range(len(self._placements)))  # placement schedulers not lost
        self._forwarded: Dict[str, TaskState] = {}  # forwarded, not placed yet (sent again if its placement dies)
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
        if self._placements and restarted:
            ray.get([p.reset.remote() for p in self._placements])  # what they hold, the clients send again
        if self._placements:
            threading.Thread(target=self._forward_loop, name="ra-selector-forward", daemon=True).start()

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
            if self._s.finish(tid, now) is None or not self._placements:
                continue
            self._forwarded.pop(tid, None)
            hop = self._hop.pop(tid, None)
            if hop is not None and hop in self._live:
                self._fin[hop].append(tid)
            node = self._placed.pop(tid, None) or self._adopted.pop(tid, None)
            if node is not None:
                self._loads[node] -= 1

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

    def exchange(self, client: str, tasks: Sequence[TaskState], handback: Optional[dict] = None) -> dict:
        """A client's new tasks (and, from a lease holder giving it back, ``handback``). Returns ``{"decisions": [(task, node)...]}``, ``{"lease": {...}}``
        (tasks back, undecided, with State), or, to the holder, ``{"recall": bool}``."""
        with self._cond:
            now = self._now()
            self._seen[client] = time.monotonic()
            if handback is not None:
                self._take_back(client, handback)
            if self._holder == client:  # the holder's long poll: answered at a recall
                deadline = time.monotonic() + self._wait_s
                while self._recalled_at is None and not self._closed and time.monotonic() < deadline:
                    self._cond.wait(deadline - time.monotonic())
                return {"recall": self._recalled_at is not None, "incarnation": self.incarnation}
            if self._holder is not None:
                self._recall()
            elif handback is None and self._may_lease(client):  # (one giving a lease back is leaving or recalled)
                return {"lease": self._grant(client), "tasks": list(tasks), "incarnation": self.incarnation}
            tasks = [t for t in tasks if not self._s.knows(t.id)]  # (sent again after a restart)
            for t in tasks:
                t.origin = client
                self._s.add(t, now)
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
            return {"decisions": out, "incarnation": self.incarnation}

    # ---------------------------------------------------------------- leases
    def _may_lease(self, client: str) -> bool:
        if not self._lease or self._closed or self._s.pending or self._s.running:
            return False
        if time.monotonic() < self._lease_from:
            return False
        quiet = time.monotonic() - self.LEASE_QUIET_S
        return all(seen < quiet for c, seen in self._seen.items() if c != client)

    def _grant(self, client: str) -> dict:
        self._holder, self._recalled_at = client, None
        self.leases += 1
        return {"state": copy_state(self._s.interp.state), "dead": [n.id for n in self._s.nodes if not n.alive]}

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

    def _take_back(self, client: str, handback: dict) -> None:
        """Running tasks decided elsewhere, whose finishes come here from now on: a lease coming
        back, with the holder's State (unless it was taken already: a late holder's State is
        stale by now) -- or, after a restart (``rebuild``), a client's tasks decided by the old
        incarnation, whose OnDispatch rebuilds their share of State. A rebuild that comes while
        a lease is out waits for it to end: the State the holder hands back replaces this one,
        and would drop their share. A lease whose State is not applied -- taken back from a
        silent holder, or granted by an incarnation that died -- comes back as a rebuild too."""
        rebuild = bool(handback.get("rebuild"))
        lease_back = "state" in handback and self._holder == client
        if lease_back and handback.get("granted_by", self.incarnation) == self.incarnation:
            self._s.interp.state.update(handback["state"])
        elif "state" in handback:
            rebuild = True
        if lease_back:
            self._end_lease()
        for node_id in handback.get("dead", ()):
            self._mark_dead(node_id)
        if rebuild and self._holder is not None:
            self._rebuilt.setdefault(client, {}).update((t.id, t) for t in handback["running"])  # (exchange recalls it)
        else:
            self._adopt(client, handback["running"], dispatch_hooks=rebuild)
        self._cond.notify_all()

    def _adopt(self, client: str, tasks: Sequence[TaskState], dispatch_hooks: bool) -> None:
        running = [t for t in tasks if not self._s.knows(t.id)]
        for t in running:
            t.origin = client
            if self._placements:  # the hybrid's selector counts them in its pool of every slot
                self._adopted[t.id], t.node = t.node, POOL
                self._loads[self._adopted[t.id]] = self._loads.get(self._adopted[t.id], 0) + 1
        self._s.adopt(running, dispatch_hooks=dispatch_hooks, now=self._now())

    def _decide(self, now: float) -> None:
        if self._holder is not None:  # the holder's running tasks are not counted here until it hands them back
            return
        chosen = self._s.decide(now)
        if not chosen:
            return
        for t in chosen:
            if t.node is None:  # dropped at its deadline: its client hears, and clears its record
                self._mail_to(t.origin, t.id, None, now)
                continue
            self.decisions += 1
            if self._placements:  # the hybrid: the node is the placement scheduler's to pick
                i = self._batch_to
                self._hop[t.id] = i
                self._origin[t.id] = t.origin
                sent = self._forwarded[t.id] = TaskState(t.id, t.arrival, t.fields, t.origin, deadline=t.deadline)
                self._out[i].append(sent)
            else:
                self._mail_to(t.origin, t.id, t.node, now)
        self._cond.notify_all()

    def _next_live(self, i: int) -> int:
        """The live placement scheduler after ``i`` (round-robin)."""
        n = len(self._placements)
        return next((j % n for j in range(i + 1, i + 1 + n) if j % n in self._live), i)

    def _lose_placement(self, i: int) -> None:
        """Placement scheduler ``i`` died (holds the lock): the tasks it was sent and did not place
        go to the next live one, and none is sent to it again."""
        self._live.discard(i)
        if not self._live:  # (the cluster lost every node a placement ran on)
            logging.getLogger(__name__).error("every placement scheduler of the hybrid is gone")
            return
        j = self._next_live(i)
        if self._batch_to == i:
            self._batch_to = j
        lost = [t for tid, t in self._forwarded.items() if self._hop.get(tid) == i]  # (those in _out[i] too)
        for t in lost:
            self._hop[t.id] = j
        self._out[j].extend(lost)
        self._out[i], self._fin[i] = [], []
        self._cond.notify_all()

    def _forward_loop(self) -> None:
        import ray

        held = [0] * len(self._placements)  # tasks a placement scheduler holds (no room in its view)
        while not self._closed:
            with self._cond:
                if not any(self._out) and not any(self._fin) and not any(held):
                    self._cond.wait(0.005)
                loads = dict(self._loads)  # as of the finishes these batches carry
                batches = [(i, self._out[i], self._fin[i]) for i in self._live
                           if self._out[i] or self._fin[i] or held[i]]
                if self._out[self._batch_to]:  # the next tasks decided go to the next placement scheduler
                    self._batch_to = self._next_live(self._batch_to)
                for i, _, _ in batches:
                    held[i] += len(self._out[i])
                    self._out[i], self._fin[i] = [], []
            if not batches:
                continue
            refs = [self._placements[i].place.remote(out, fin, loads) for i, out, fin in batches]
            answers = []
            for (i, _, _), ref in zip(batches, refs):
                try:
                    answers.append((i, ray.get(ref)))
                except Exception:  # the placement actor died (its node, perhaps): the others take its tasks
                    with self._cond:
                        held[i] = 0
                        self._lose_placement(i)
            with self._cond:
                now, freed = self._now(), False
                for i, decided in answers:
                    held[i] -= len(decided)
                    for tid, node in decided:
                        self._forwarded.pop(tid, None)
                        if node is None:  # the placement dropped it at its deadline: its room in the pool is free
                            self._release([tid], now)
                            freed = True
                        else:
                            self._placed[tid] = node
                            self._loads[node] = self._loads.get(node, 0) + 1
                        freed |= not self._mail_to(self._origin.pop(tid), tid, node, now)
                if freed:  # a gone client's decisions made room
                    self._decide(now)
                self._cond.notify_all()
            if not any(self._out) and any(held):
                time.sleep(0.001)  # held tasks wait for finishes or a heartbeat: do not spin

    def ping(self) -> None:
        """Nothing: a client times the round trip (the monitor's message latency)."""

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
        for p in self._placements:
            p.mark_dead.remote(node_id)

    def stats(self) -> dict:
        with self._cond:
            return {"decisions": self.decisions, "pending": self._s.pending, "leases": self.leases,
                    "live_placements": len(self._live),
                    "holder": self._holder, "loads": {n: k for n, k in self._loads.items() if k}}

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
            self._cond.notify_all()
