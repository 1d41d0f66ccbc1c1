"""The submitting process's side of every plan: queue, launch, completions.

``submit`` hands the task to this process's *decider* -- a scheduler in
this process (decentralized plans: the decision is made here, no actor in
the launch path) or the selector actor's client (centralized and hybrid:
tasks and finishes go in batches) -- and launches each decided task itself,
with its node's slot resource, so the caller owns every result, as with
plain Ray.

Completions are *harvested*: one ``ray.wait(..., fetch_local=False)`` finds
what finished since the last look, by whichever thread needs it -- a caller
waiting for room, a caller whose view is older than ``FRESH_S``
(``FRESH_HELD_S`` while Ray's queue holds the tasks), or the dispatcher
thread. Not a callback per task (``ObjectRef.future()``): that woke a
thread per completion, took the GIL from Ray's io thread for each, and
pulled every result into this process; here results stay on the nodes that
made them until someone fetches them.

A harvest looks at a *window*, not at every task in flight: Ray's owner runs
the tasks of one shape bound to one node in the order they were submitted
(one queue per scheduling class, served by the workers it leases there), so
what finished is, but for the few running side by side, a prefix of that
order. ``ray.wait`` costs per ref it is given, and with Ray holding a full
cluster's tasks (``hold="ray"``) thousands may be in flight: each harvest
looks at the first ``window`` unharvested tasks of each (node, shape), and
at every task once in a while (``SCAN_S``; sooner while windows find nothing
finished), for tasks that finish out of that order (those that waited for
their arguments).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
import time
from collections import Counter, deque
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from ray_adaptive.dsl.ir import Policy
from ray_adaptive.errors import PlacementDeadlineExceeded
from ray_adaptive.monitor import Monitor, TaskRecord
from ray_adaptive.plan.scheduler import TaskState
from ray_adaptive.runtime.messages import Handover, new_client_id
from ray_adaptive.runtime.switch import PlanWatcher


@dataclass(slots=True)
class _Task:
    """A submitted task in this process: what to launch and whom to tell."""

    state: TaskState
    launch: Callable[[str], Any]  # node id -> ObjectRef of the task submitted there
    shape: Any = None  # tasks of one shape on one node run in submission order (see the module doc)
    future: Optional[Future] = None  # for :meth:`Router.submit`; a ``.remote()`` caller reads ref/error
    node: Optional[str] = None
    dispatched_at: float = 0.0
    launched: bool = False  # False if Ray refused the submission
    expired: bool = False  # dropped at its deadline while undecided: still in the scheduler's queue
    ref: Any = None  # its ObjectRef, once launched
    error: Optional[BaseException] = None  # why it never will be (dropped, refused, cancelled)

    @property
    def settled(self) -> bool:
        return self.ref is not None or self.error is not None

    def result(self):
        if self.error is not None:
            raise self.error
        return self.ref


@dataclass
class RouterStats:
    submitted: int = 0
    dispatched: int = 0
    finished: int = 0
    dropped: int = 0  # not placed by their deadline: never launched
    harvests: int = 0  # looks for finished tasks (a ray.wait each)
    scans: int = 0  # of them, over every task in flight (the others: over the windows)
    watched: int = 0  # refs those looks were given, in all


class Router:
    """This process's submissions of one policy (see the module doc)."""

    NODE_CHECK_S = 1.0  # how often the dispatcher thread looks for dead nodes (and, with a monitor, pings its actor)
    REPORT_S = 1.0  # how often this process reports its load to the store (see Monitor.load)
    TICK_S = 0.005  # the dispatcher's period: heartbeats of a waiting decider, deadlines
    FRESH_S = 0.005  # a decision sees every completion older than this: older views are harvested first
    # ... while Ray's queue holds a full cluster's tasks (the topology's overflow): no decision then
    # waits for room, and the loads it reads only rank the nodes, as well with 20 ms old finishes --
    # a harvest per ~16 tasks of a busy loop instead of ~4 (docs/benchmarks.md)
    FRESH_HELD_S = 0.02
    # the dispatcher harvests what nobody harvested for this long. A caller waiting for room harvests
    # every TICK_S itself (its wait's timeout): a dispatcher also looking every TICK_S would collide
    # with it (docs/benchmarks.md)
    STALE_S = 0.01
    IDLE_S = 0.05  # the dispatcher thread's nap while nothing is launched or waiting here
    # a harvest looks at every task in flight this often (else at the windows, see the module doc);
    # as often as SCAN_BLOCKED_S while the windows found nothing finished
    SCAN_S = 1.0
    SCAN_BLOCKED_S = 0.1

    def __init__(self, policy: Policy, topology, *, client: Optional[str] = None,
                 alive_nodes: Optional[Callable[[], set]] = None,
                 on_dead: Optional[Callable[[str], None]] = None, monitor: Optional[Monitor] = None,
                 metrics_every_s: Optional[float] = None, wake_after: int = 1, watch: bool = True,
                 window: int = 8):
        """``topology``: the plan in force (its generation); ``client``: this process's id at its store
        (registered by whoever joined it). ``watch``: follow live switches (see
        :class:`~ray_adaptive.runtime.switch.PlanWatcher`). ``window``: a harvest's look per
        (node, shape) (see the module doc)."""
        self.policy = policy
        self.client = client or new_client_id()
        self.topology = topology
        self.decider = topology.decider(self.client)
        self._fresh_s = self._freshness(topology)
        self.stats = RouterStats()
        self.monitor = monitor
        self._alive_nodes = alive_nodes
        self._on_dead = on_dead
        self._metrics_every = metrics_every_s
        self.wake_after = wake_after
        self._next_metrics = time.monotonic() + (metrics_every_s or 0.0)
        self._next_node_check = time.monotonic() + self.NODE_CHECK_S
        self._next_report = time.monotonic()
        self._dead: set = set()
        self._tasks: Dict[str, _Task] = {}  # submitted, not finished
        self._launched: Dict[Any, _Task] = {}  # ObjectRef -> its task, in launch order, until harvested
        self._order: Dict[tuple, deque] = {}  # (node, shape) -> its refs in launch order (harvested: dropped lazily)
        self.window = max(1, window)
        self._scan_at = 0.0  # (monotonic) when a harvest looks at every task again
        self._blocked = False  # the last windowed look found nothing finished
        self._per_node: Dict[str, int] = {}
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._harvested_at = time.monotonic()
        self._waiters = 0  # callers in call(): they harvest, the dispatcher thread need not
        self._deadlines: List[tuple] = []  # heap of (deadline, task id): tasks with a finite deadline_s
        self._expired = 0  # tasks dropped at their deadline that the scheduler has not reached yet
        self._message_s: deque = deque(maxlen=10_000)  # round trips of the pings to the decider's actor
        self._closed = False
        self._failed: Optional[BaseException] = None  # what ended the dispatcher thread, if it failed
        # a live switch: while frozen, submissions and finishes wait here for the next plan's decider
        self._frozen = False
        self._held: List[TaskState] = []  # submitted while frozen
        self._held_finished: List[TaskState] = []  # finished while frozen
        self._handover: Optional[Handover] = None
        self._last_launch = 0.0  # (monotonic) the last decision launched: a switch's pause starts there
        self._pause_from: Optional[float] = None
        self.pauses: deque = deque(maxlen=1000)  # (generation, seconds without a decision) per switch
        # ... and where that pause went: (generation, idle before the freeze, frozen, resumed to first decision)
        self.pause_parts: deque = deque(maxlen=1000)
        self._frozen_at = self._resumed_at = 0.0
        self._pause_plan = -1  # the generation being replaced: its decisions do not end the pause
        self.decider.on_decided = self._launch
        self._thread = threading.Thread(target=self._run, name=f"ra-router-{policy.name}", daemon=True)
        self._thread.start()
        self.watcher = PlanWatcher(self) if watch else None

    def now(self) -> float:
        return self.decider.now()

    def _freshness(self, topology) -> float:
        """How old the finishes a decision sees may be (see ``FRESH_HELD_S``)."""
        return self.FRESH_HELD_S if topology.overflow else self.FRESH_S

    # ---------------------------------------------------------------- submit
    def submit(self, fields: dict, launch: Callable[[str], Any], deadline_s: float = math.inf,
               shape: Any = None) -> Future:
        """Queue a task; the Future resolves to its ObjectRef once it is dispatched, or raises
        :class:`~ray_adaptive.errors.PlacementDeadlineExceeded` if it is not placed within
        ``deadline_s``: it is dropped, as the compiler's cluster model drops a task not picked by
        its deadline (within ~``TICK_S`` of it), and never launched; its room, if the scheduler
        already chose a node, goes straight back. ``shape``: equal for tasks Ray queues alike
        (one function with one set of options), to harvest them by windows."""
        return self._enqueue(fields, launch, deadline_s, Future(), shape).future

    def call(self, fields: dict, launch: Callable[[str], Any], deadline_s: float = math.inf, shape: Any = None):
        """:meth:`submit`, then wait for the ObjectRef (``.remote()``). A decision made in this
        thread returns the ref at once, with no Future; waiting for a local decision, the caller
        harvests completions itself (see :meth:`_harvest`)."""
        task = self._enqueue(fields, launch, deadline_s, Future() if self.decider.remote else None, shape)
        if task.settled:
            return task.result()
        if task.future is not None and self.decider.remote:  # decided by the selector: just wait
            return task.future.result()
        with self._cond:
            self._waiters += 1
        try:
            while not task.settled:
                if self._launched:
                    self._harvest(block=self.TICK_S)
                    continue
                with self._cond:  # nothing of ours runs: room must come from elsewhere (a heartbeat)
                    if not task.settled:
                        self._cond.wait(self.TICK_S)
        finally:
            with self._cond:
                self._waiters -= 1
        return task.result()

    def _enqueue(self, fields: dict, launch: Callable[[str], Any], deadline_s: float,
                 future: Optional[Future], shape: Any = None) -> _Task:
        if time.monotonic() - self._harvested_at > self._fresh_s:
            self._harvest(block=0.0)
        with self._cond:
            if self._closed:
                raise RuntimeError(f"the runtime of policy {self.policy.name!r} is shut down")
            if self._failed is not None:
                raise RuntimeError(f"the dispatcher of policy {self.policy.name!r} failed ({self._failed!r}); "
                                   f"restart the policy") from self._failed
            now = self.now()
            state = TaskState(f"{self.client}-{next(self._ids):09d}", now, fields, deadline=now + deadline_s)
            task = _Task(state, launch, shape, future)
            if future is not None:
                future.task_id = state.id  # (what to ask why it waits: PolicyRuntime.why_pending)
            self._tasks[state.id] = task
            if state.deadline < math.inf:
                heapq.heappush(self._deadlines, (state.deadline, state.id))
            self.stats.submitted += 1
            if self.monitor is not None:
                self.monitor.arrived(state.arrival, fields)
            if self._frozen:  # a live switch: the next plan's decider takes it
                self._held.append(state)
                chosen = []
            else:
                chosen = self.decider.submit([state])  # a local decider decides in the caller's thread
            if chosen:  # (claimed under this lock: one lock round less per task)
                claimed, gone, plan = self._claim(chosen, now)
            else:
                self._cond.notify()  # an idle dispatcher thread wakes: a task may wait here now
        if chosen:
            self._fire(claimed, gone, plan)
        return task

    def _launch(self, decided: List[TaskState]) -> None:
        """Submit decided tasks to Ray -- outside the lock, so deciding and submitting overlap."""
        if not decided:
            return
        with self._cond:
            claimed, gone, plan = self._claim(decided, self.now())
        self._fire(claimed, gone, plan)

    def _claim(self, decided: List[TaskState], now: float) -> tuple:
        """Of the decided tasks, those to launch now and those never to be (holds the lock), and the
        generation of the plan that decided them: -1 while frozen (the replaced plan's last decisions,
        landing during a switch)."""
        claimed: List[_Task] = []
        gone: List[_Task] = []  # never launched: dropped (deadline), cancelled (close) or refused by Ray
        for state in decided:
            task = self._tasks.get(state.id)
            if task is None:
                continue
            if task.error is None:
                if state.node is None:  # the scheduler dropped it at its deadline (before _expire did)
                    self._drop(task, "was not placed by then")
                elif now > task.state.deadline:  # placed too late (before _expire saw it)
                    self._drop(task, f"was placed {now - state.arrival:.3f} s after submission")
            if task.error is not None:  # dropped before it costs a launch and a slot
                del self._tasks[state.id]
                if task.expired:  # the scheduler reached it: no longer in its queue
                    self._expired -= 1
                gone.append(task)
                continue
            task.node, task.dispatched_at = state.node, now
            claimed.append(task)
        return claimed, gone, (-1 if self._frozen else self.topology.generation)

    def _fire(self, claimed: List[_Task], gone: List[_Task], plan: int) -> None:
        """Launch claimed tasks (outside the lock), then count them launched, in one lock round.
        ``plan``: the generation that decided them (see :meth:`_claim`)."""
        launched = []
        for task in claimed:
            try:
                launched.append((task, task.launch(task.node)))
            except BaseException as err:  # a bad argument or option: the caller gets the error
                with self._cond:
                    self._tasks.pop(task.state.id, None)
                    task.error = err
                gone.append(task)
        if launched:
            with self._cond:
                per_node, order_of = self._per_node, self._order
                for task, ref in launched:
                    task.launched, task.ref = True, ref
                    node = task.node
                    per_node[node] = per_node.get(node, 0) + 1
                    self._launched[ref] = task
                    order = order_of.get((node, task.shape))
                    if order is None:
                        order = order_of[(node, task.shape)] = deque()
                    order.append(ref)
                self.stats.dispatched += len(launched)
                now = self._last_launch = time.monotonic()
                if self._pause_from is not None:
                    self._pause_ended(plan, now)
                if self._waiters:
                    self._cond.notify_all()
            if self.monitor is not None:
                self.monitor.decided([task.state.fields for task, _ in launched])
            for task, ref in launched:
                if task.future is not None:
                    task.future.set_result(ref)
        if gone:
            self._tell(gone)
            placed = [t.state.id for t in gone if t.state.node is not None]  # (dropped unplaced: no room held)
            with self._cond:  # their room goes back, as a finish would give it
                chosen = self._finished(placed)
            self._launch(chosen)

    def _finished(self, ids: List[str], tasks: Sequence[_Task] = ()) -> List[TaskState]:
        """Tell the decider these tasks left their nodes (holds the lock); frozen, keep them for the next."""
        if not ids:
            return []
        if self._frozen:
            known = {t.state.id: t.state for t in tasks}
            self._held_finished += [known.get(i) or TaskState(i, 0.0, {}) for i in ids]
            return []
        return self.decider.finished(ids)

    # ---------------------------------------------------------- live switches
    def _pause_ended(self, plan: int, now: float) -> None:
        """A launch while a switch's pause is measured (holds the lock): decided by the next plan, it
        ends the pause; a late decision of the replaced plan (decided before the freeze, landing
        after it) moves the pause's start instead."""
        if plan <= self._pause_plan:
            self._pause_from = now
            return
        g, start = self.topology.generation, self._pause_from
        self.pauses.append((g, now - start))
        self.pause_parts.append((g, max(0.0, self._frozen_at - start),
                                 self._resumed_at - max(self._frozen_at, start), now - self._resumed_at))
        self._pause_from = None

    def freeze(self) -> dict:
        """Stop deciding for a live switch: the decider hands over what it holds (see
        :mod:`ray_adaptive.runtime.switch`); submissions and finishes wait here meanwhile."""
        with self._cond:
            self._frozen = True
            self._frozen_at = time.monotonic()
            self._pause_from = self._last_launch or self._frozen_at
            self._pause_plan = self.topology.generation
            decider = self.decider
        if decider.thread_safe:  # (its thread may be launching: it takes this router's lock)
            handover = decider.freeze()
        else:
            with self._cond:
                handover = decider.freeze()
        with self._cond:
            self._handover = handover
            outstanding: Dict[str, int] = {}  # (the next plan's replicas see these from its first decision)
            for t in self._tasks.values():
                if t.state.node is not None and t.error is None:
                    outstanding[t.state.node] = outstanding.get(t.state.node, 0) + 1
            return {"pending": len(handover.arrived) + len(handover.new) + len(self._held),
                    "running": sum(outstanding.values()), "outstanding": outstanding}

    def resume(self, topology, seen=None, decider=None) -> None:
        """Take up the plan a live switch put in force: a decider of it gets this process's running tasks,
        its undecided ones and the finishes held meanwhile (``seen``: the store's State and loads as of
        the publish, see :meth:`~ray_adaptive.runtime.local.LocalDecider.resume`; ``decider``: the
        topology's, made ahead)."""
        new = decider or topology.decider(self.client)
        new.on_decided = self._launch
        with self._cond:
            handover, self._handover = self._handover or Handover(), None
            live = [t for t in self._tasks.values() if t.error is None]
            running = [t.state for t in live if t.state.node is not None] + self._held_finished
            mine = {t.state.id for t in live if t.state.node is None}
            arrived = [t for t in handover.arrived if t.id in mine]
            new_tasks = [t for t in (*handover.new, *self._held) if t.id in mine]
            finished = [t.id for t in self._held_finished]
            old, self.decider, self.topology = self.decider, new, topology
            self._fresh_s = self._freshness(topology)
            self._held, self._held_finished, self._expired = [], [], 0
            self._resumed_at = time.monotonic()
            if not (arrived or new_tasks):
                self._pause_from = None  # nothing waited: no pause to measure
            chosen = new.resume(running, arrived, new_tasks, topology.rebuild, seen)
            chosen += new.finished(finished) if finished else []
            for n in self._dead:
                new.mark_dead(n)
            self._frozen = False
            self._cond.notify_all()
        self._launch(chosen)
        old.close(switching=True) if old.thread_safe else old.close()

    def task_id_of(self, ref) -> Optional[str]:
        """The id of the task whose ObjectRef is ``ref`` (while it runs: finished ones are forgotten)."""
        with self._cond:
            task = self._launched.get(ref)
            return task.state.id if task is not None else None

    def oldest_pending(self, k: int = 5) -> List[tuple]:
        """The ``k`` tasks waiting longest for a decision here: ``(task id, seconds waiting)``."""
        now = self.now()
        with self._cond:
            waiting = [t.state for t in self._tasks.values() if t.state.node is None and t.error is None]
        return [(s.id, round(now - s.arrival, 3)) for s in sorted(waiting, key=lambda s: s.arrival)[:k]]

    def explain(self, task_id: str) -> dict:
        """Why ``task_id`` (submitted from this process) is pending, or why it landed where it did."""
        with self._cond:
            task = self._tasks.get(task_id)
            frozen = self._frozen
            decider = self.decider
        if task is None:
            return {"state": "finished or unknown", "task": task_id,
                    "why": "not pending nor running in this process: finished, dropped, or never submitted"}
        if task.error is not None:
            return {"state": "dropped", "task": task_id, "why": str(task.error)}
        if frozen and task.state.node is None:
            return {"state": "pending", "task": task_id, "reason": "switching",
                    "why": "the plan is being switched live: it is decided as soon as the next plan is in force"}
        if decider.thread_safe:
            out = decider.explain(task_id)
        else:
            with self._cond:
                out = decider.explain(task_id)
        if out is None:
            where = "launched on " + task.node[:12] if task.node else "decided"
            out = {"state": "placed" if task.state.node else "pending", "task": task_id,
                   "why": f"{where}; its decision is no longer in the scheduler's records"}
        return out

    def report(self) -> dict:
        """What this process reports to its store each second: its monitor's load (see
        :meth:`~ray_adaptive.monitor.Monitor.load`), its tasks pending and running per group, its
        generation, and the latency of the decisions made in this process."""
        from ray_adaptive.monitor import percentiles

        out = self.monitor.load()
        group_by = self.monitor.group_by
        with self._cond:  # (tallied, then one dict update per group: this runs every second)
            tally = Counter((str(t.state.fields.get(group_by, "")) if group_by else "", t.state.node is not None)
                            for t in self._tasks.values() if t.error is None)
            generation = self.topology.generation
            latencies = [] if self.decider.thread_safe else self.decider.decision_latencies()[-10_000:]
        for (group, placed), k in tally.items():
            g = out["groups"].setdefault(group, {"arrivals": 0, "decided": 0, "finished": 0, "dropped": 0})
            key = "running" if placed else "pending"
            g[key] = g.get(key, 0) + k
        p50, p99 = percentiles(latencies, (0.5, 0.99)) if latencies else (None, None)
        return {**out, "generation": generation, "decision_p50_s": p50, "decision_p99_s": p99,
                "oldest_pending": self.oldest_pending()}

    def wait_generation(self, generation: int, timeout_s: float = 60.0) -> None:
        """Block until this router has taken up ``generation`` of the plan (a live switch it follows)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.topology.generation >= generation or self._closed, timeout_s):
                raise RuntimeError(f"policy {self.policy.name!r}: generation {generation} not taken up in "
                                   f"{timeout_s:g} s")

    def _drop(self, task: _Task, when: str) -> None:
        """Settle a task that missed its deadline (holds the lock)."""
        self.stats.dropped += 1
        if self.monitor is not None:
            self.monitor.dropped(task.state.fields)
        task.error = PlacementDeadlineExceeded(
            f"task {task.state.id} of policy {self.policy.name!r} {when}, past its deadline_s "
            f"{task.state.deadline - task.state.arrival:g}; dropped without running")

    def _tell(self, tasks: List[_Task]) -> None:
        """Wake the callers of settled tasks that were not launched (outside the lock)."""
        with self._cond:
            if self._waiters:
                self._cond.notify_all()
        for task in tasks:
            if task.future is not None and not task.future.done():
                task.future.set_exception(task.error)

    def _expire(self) -> None:
        """Tasks still undecided at their deadline are dropped now: the caller hears at once, and
        the scheduler, which owns its queue wherever it runs, drops each when it reaches it
        (:meth:`_launch`), its room given straight back."""
        with self._cond:
            now, expired = self.now(), []
            while self._deadlines and self._deadlines[0][0] < now:
                task = self._tasks.get(heapq.heappop(self._deadlines)[1])
                if task is not None and task.node is None and task.error is None:
                    self._drop(task, "was not placed by then")
                    task.expired = True
                    self._expired += 1
                    expired.append(task)
            if len(self._deadlines) > 2 * len(self._tasks) + 1024:  # mostly tasks long placed: keep the live
                self._deadlines = [e for e in self._deadlines if e[1] in self._tasks]
                heapq.heapify(self._deadlines)
        if expired:
            self._tell(expired)

    def _harvest(self, block: float) -> bool:
        """Apply every launched task that has finished -- waiting up to ``block`` s for one if none
        has -- and launch what that made room for. False if none had. Any thread may harvest; a
        finish is applied once, by the thread that takes it out of ``_launched``."""
        import ray

        with self._cond:
            refs, windowed = self._watch()
            self.stats.harvests += 1
            self.stats.scans += not windowed
            self.stats.watched += len(refs)
        self._harvested_at = time.monotonic()
        if not refs:
            if block:
                time.sleep(block)
            return False
        # waiting, wake after ``wake_after`` finishes (or when ``block`` is up): room comes in batches,
        # launched back to back, not a wake-up and a launch per finish -- but batches smaller than
        # the node queues, so that Ray never finds one empty and returns its leased worker
        want = min(self.wake_after, len(refs)) if block else len(refs)
        ready, _ = ray.wait(refs, num_returns=want, timeout=block, fetch_local=False)
        # woken by a batch, more may have finished meanwhile: a second look collects them. Woken by
        # one finish (shallow queues), the room it made is what matters: a second non-blocking
        # ``ray.wait`` costs about as much as it would find
        if 1 < want < len(refs) and len(ready) == want:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        if windowed:
            self._blocked = not ready
        if not ready:
            return False
        with self._cond:
            now = self.now()
            finished = [t for t in (self._launched.pop(r, None) for r in ready) if t is not None]
            tasks, per_node = self._tasks, self._per_node
            for task in finished:
                tasks.pop(task.state.id, None)
                per_node[task.node] -= 1
            self.stats.finished += len(finished)
            chosen = self._finished([t.state.id for t in finished], finished)
        if self.monitor is not None and finished:
            self.monitor.finished([TaskRecord(t.state.id, t.state.arrival, t.dispatched_at, now, t.node, t.state.fields)
                                   for t in finished])
        self._launch(chosen)
        return bool(finished)

    def _watch(self) -> tuple:
        """The refs a harvest looks at (holds the lock), and whether they are windows (see the module doc)."""
        launched = self._launched
        now = time.monotonic()
        if now >= self._scan_at or (self._blocked and now >= self._scan_at - self.SCAN_S + self.SCAN_BLOCKED_S):
            self._scan_at = now + self.SCAN_S
            return list(launched), False
        refs: List[Any] = []
        w = self.window
        for key, order in list(self._order.items()):
            while order and order[0] not in launched:
                order.popleft()
            if not order:
                del self._order[key]
                continue
            n = 0
            for ref in order:
                if ref in launched:
                    refs.append(ref)
                    n += 1
                    if n == w:
                        break
        return refs, True

    def _ping(self) -> None:
        """Time an empty call to the actor the decider talks to (the store or the selector): the
        latency between this process and it, a round trip (recorded when the answer comes)."""
        try:
            self.decider.ping(self._message_s.append)
        except Exception:
            pass  # the actor is gone (shutdown): nothing to time

    def message_latencies(self) -> List[float]:
        """Round trips (seconds) of the recent pings to the actor the decider talks to, one per
        ``NODE_CHECK_S`` while a monitor is attached."""
        return list(self._message_s)

    def store_latencies(self) -> List[float]:
        """Round trips (seconds) of this process's recent syncs with the state store (none if its
        decisions come from the selector)."""
        with self._cond:
            return self.decider.store_latencies()

    def check_nodes(self) -> List[str]:
        """Stop deciding for nodes that died (``on_dead`` then moves their slots). Returns the newly dead."""
        if self._alive_nodes is None:
            return []
        alive = self._alive_nodes()
        dead = [n for n in self.decider.node_ids() if n not in alive and n not in self._dead]
        for n in dead:
            self._dead.add(n)
            with self._cond:
                if not self._frozen:  # (frozen: the next plan's decider learns of it when it takes over)
                    self.decider.mark_dead(n)
            if self._on_dead is not None:
                self._on_dead(n)
        return dead

    def _run(self) -> None:
        """The dispatcher thread (see :meth:`_dispatch`). Should it fail, every task not launched
        yet fails with the cause, and so does every later submission: none waits forever."""
        try:
            self._dispatch()
        except BaseException as err:
            self._fail(err)

    def _fail(self, err: BaseException) -> None:
        logging.getLogger(__name__).error("the dispatcher of policy %r failed", self.policy.name, exc_info=err)
        with self._cond:
            self._failed = err
            left = [t for t in self._tasks.values() if not t.launched and t.error is None]
            for t in left:
                t.error = RuntimeError(f"the dispatcher of policy {self.policy.name!r} failed ({err!r}) "
                                       f"before task {t.state.id} was launched")
        self._tell(left)

    def _dispatch(self) -> None:
        """Completions while tasks wait here or the last harvest is stale; heartbeats of a waiting
        local decider; deadlines; every NODE_CHECK_S, dead nodes. Ends once closed with nothing
        running, or when Ray was shut down under it."""
        import ray

        while ray.is_initialized():
            with self._cond:
                waiting = self.decider.pending > 0 and not self._waiters
            if waiting:  # tasks wait for room and no caller looks for it: see it the moment it is made
                self._harvest(block=self.TICK_S)
            elif self._launched:  # a submitting caller harvests as it needs; else, every STALE_S
                stale = self._harvested_at + max(self.STALE_S, self._fresh_s) - time.monotonic()
                if stale > 0:
                    time.sleep(stale)  # a submitting caller harvests meanwhile, as it needs
                else:
                    self._harvest(block=0.0)
            else:  # nothing of ours runs: a heartbeat every TICK_S while tasks wait here, else a nap
                with self._cond:
                    if not self._closed:
                        self._cond.wait(self.TICK_S if self.decider.pending else self.IDLE_S)
            with self._cond:
                chosen = self.decider.tick() if not (self._closed or self._frozen) else []
            self._launch(chosen)
            self._expire()
            if time.monotonic() >= self._next_node_check:
                self._next_node_check = time.monotonic() + self.NODE_CHECK_S
                self.check_nodes()
                if self.monitor is not None and not self._frozen:
                    self._ping()
            if self.monitor is not None and time.monotonic() >= self._next_report:
                self._next_report = time.monotonic() + self.REPORT_S
                self.topology.store.report.remote(self.client, self.report())  # (fire and forget)
            if self._metrics_every and self.monitor is not None and time.monotonic() >= self._next_metrics:
                self._next_metrics = time.monotonic() + self._metrics_every
                try:
                    self.monitor.export(self)
                except Exception:  # figures are best effort: an actor replaced by a switch answers no more
                    logging.getLogger(__name__).debug("metrics export failed", exc_info=True)
            with self._cond:
                if self._closed and not any(self._per_node.values()):
                    return

    # ------------------------------------------------------------------ state
    @property
    def pending(self) -> int:
        """Tasks waiting for a decision (not those dropped at their deadline the scheduler still holds)."""
        with self._cond:
            return max(0, self.decider.pending - self._expired) + len(self._held)

    def decision_latencies(self) -> List[float]:
        """Recent decision latencies (seconds) of the scheduler that decides for this process."""
        if self.decider.thread_safe:  # it may make an RPC: never under our lock
            return self.decider.decision_latencies()
        with self._cond:
            return self.decider.decision_latencies()

    def outstanding(self) -> Dict[str, int]:
        """Tasks this process launched per node, not finished yet."""
        with self._cond:
            return {n: k for n, k in self._per_node.items() if k}

    def export(self) -> dict:
        """This process's undecided tasks and, for a local decider, its State (for a plan switch)."""
        with self._cond:
            return self.decider.export()

    def close(self, timeout: float = 60.0) -> int:
        """Stop dispatching, cancel what is still undecided (its Future is cancelled, its
        ``.remote()`` raises CancelledError), and wait up to ``timeout`` seconds for dispatched
        tasks to finish. Returns how many were cancelled."""
        if self.watcher is not None:
            self.watcher.stop()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            left = [t for t in self._tasks.values() if t.node is None and t.error is None]
            for t in left:
                t.error = CancelledError(f"the runtime of policy {self.policy.name!r} was shut down "
                                         f"before task {t.state.id} was placed")
        for t in left:
            if t.future is not None:
                t.future.cancel()
        self._thread.join(timeout=timeout)
        with self._cond:  # decided after the cancel, never launched: free their room in the decider
            freed: set = set()  # (freeing room may decide more cancelled tasks: free those too)
            while True:
                ids = [tid for tid, t in self._tasks.items()
                       if t.state.node is not None and not t.launched and tid not in freed]
                if not ids:
                    break
                freed.update(ids)
                self.decider.finished(ids)
        self.decider.close()
        try:
            self.topology.store.leave.remote(self.client)
        except Exception:
            pass  # the store is gone (its runtime shut down)
        return len(left)
