"""The submitting process's side of every plan: a task's submission, its launch, and its finish.

``submit`` hands the task to this process's :class:`~ray_adaptive.runtime.decider.Decider`
-- a scheduler in this process (decentralized plans: the decision is made
here, no actor in the launch path) or the selector actor's client
(centralized and hybrid: tasks and finishes go in batches) -- and launches
each decided task itself, with its node's slot resource, so the caller owns
every result, as with plain Ray. The router is made of parts a reader can
name, each in its own module:

* submission, and the parts' clock and switch hand-over: :class:`Router` (here);
* the tasks and their launch cycle: :class:`~ray_adaptive.runtime.task_book.TaskBook`;
* the harvest of finishes: :class:`~ray_adaptive.runtime.harvest.Harvester`;
* the deadline clock: :class:`~ray_adaptive.runtime.deadlines.DeadlineClock`;
* the live-switch gate: :class:`~ray_adaptive.runtime.switch_gate.SwitchGate`;
* node membership: :class:`~ray_adaptive.runtime.membership.NodeMembership`;
* the dispatcher thread, its clock: :class:`~ray_adaptive.runtime.dispatcher.Dispatcher`.

One lock (``_cond``) guards the tasks and every part's bookkeeping; a
decider that is not thread-safe is called under it too. Ray is called
outside it, so that deciding and launching overlap.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from concurrent.futures import CancelledError, Future
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import ray

from ray_adaptive._private import autoinit
from ray_adaptive._private.submit import RayGoneError
from ray_adaptive.dsl.ir import Policy
from ray_adaptive.monitor import Monitor
from ray_adaptive.errors import InfeasibleTaskError
from ray_adaptive.plan import TaskState
from ray_adaptive.plan.fit import Demand, describe, fits
from ray_adaptive.runtime.actor_life import actor_report, actor_stats
from ray_adaptive.runtime.deadlines import DeadlineClock
from ray_adaptive.runtime.decider import Decider
from ray_adaptive.runtime.dispatcher import Dispatcher
from ray_adaptive.runtime.harvest import Harvester
from ray_adaptive.runtime.membership import NodeMembership
from ray_adaptive.runtime.messages import SyncAnswer, new_client_id
from ray_adaptive.runtime.routed import Launch, RoutedTask, RouterStats
from ray_adaptive.runtime.switch import PlanWatcher
from ray_adaptive.runtime.switch_gate import SwitchGate
from ray_adaptive.runtime.task_book import TaskBook
from ray_adaptive.runtime.topology import Topology

__all__ = ["Router", "RouterStats"]


class Router:
    """This process's submissions of one policy (see the module doc)."""

    TICK_S = Dispatcher.TICK_S  # a caller waiting for room harvests this often
    FRESH_S = 0.005  # a decision sees every completion older than this: older views are harvested first
    # ... while Ray's queue holds a full cluster's tasks (the topology's overflow): no decision then
    # waits for room, and the loads it reads only rank the nodes, as well with 20 ms old finishes
    FRESH_HELD_S = 0.02

    def __init__(self, policy: Policy, topology: Topology, *, client: Optional[str] = None,
                 alive_nodes: Optional[Callable[[], Set[str]]] = None,
                 on_dead: Optional[Callable[[str], None]] = None, monitor: Optional[Monitor] = None,
                 metrics_every_s: Optional[float] = None, wake_after: int = 1, watch: bool = True,
                 window: int = 8):
        """``topology``: the plan in force (its generation); ``client``: this process's id at its store
        (registered by whoever joined it). ``watch``: follow live switches (see
        :class:`~ray_adaptive.runtime.switch.PlanWatcher`). ``window`` and ``wake_after``: see
        :class:`~ray_adaptive.runtime.harvest.Harvester`."""
        self.policy = policy
        self.client = client or new_client_id()
        self.topology = topology
        self.fresh_s = self._freshness(topology)
        self.stats = RouterStats()
        self.monitor = monitor
        self._actors_since = actor_stats(policy.name)  # (this runtime's actor counts start here: see report)
        self._cond = threading.Condition()
        self._closed = False
        self._fitting: Set[Tuple[int, Demand]] = set()  # (generation, demand) some node fits, or may come to
        self._stopped_elsewhere = False  # ray-adaptive stop ended the runtime under this process: see stopped_elsewhere
        self._failed: Optional[BaseException] = None  # what ended the dispatcher thread, if it failed
        self._ray_gone = False  # ray.shutdown() came without ra.shutdown(): see ray_gone
        self._abandon = False  # closed with timeout 0: the dispatcher stops without waiting for running tasks
        self.harvester = Harvester(self._cond, self.stats, window, wake_after)
        self.deadlines = DeadlineClock()
        self.membership = NodeMembership(alive_nodes, on_dead)
        self.gate = SwitchGate(self.deadlines, self.membership)
        self.book = TaskBook(policy.name, self.client, self._cond, topology.decider(self.client), topology.generation,
                             self.harvester, self.gate, self.deadlines, self.stats, monitor)
        self.decider.on_decided, self.decider.on_stop = self.book.launch, self.book.stop
        autoinit.hold()  # (released once closed: see _released)
        self._released = False
        self._dispatcher = Dispatcher(self, self.harvester, monitor, f"ra-router-{policy.name}",
                                      metrics_every_s=metrics_every_s)
        self._dispatcher.start()
        self.watcher = PlanWatcher(self) if watch else None

    @property
    def decider(self) -> Decider:
        """The plan in force's decider in this process (a live switch replaces it)."""
        return self.book.decider

    def now(self) -> float:
        return self.decider.now()

    def _freshness(self, topology: Topology) -> float:
        """How old the finishes a decision sees may be (see ``FRESH_HELD_S``)."""
        return self.FRESH_HELD_S if topology.overflow else self.FRESH_S

    # ---------------------------------------------------------------- submit
    def submit(self, fields: dict, launch: Launch, deadline_s: float = math.inf, shape: Any = None,
               demand: Demand = (), preemptible: bool = False) -> Future:
        """Queue a task: a Future of its ObjectRef once launched; or of a
        :class:`~ray_adaptive.errors.PlacementDeadlineExceeded` when not placed within ``deadline_s``
        (see :mod:`ray_adaptive.runtime.deadlines`). ``shape``: equal for tasks Ray queues alike (see
        :mod:`ray_adaptive.runtime.harvest`). ``demand``: the task's Ray resources (see
        :mod:`ray_adaptive.plan.fit`): only nodes that have them are candidates, and a task no node has
        them for, nor any node the autoscaler may add, is refused (:class:`~ray_adaptive.InfeasibleTaskError`).
        ``preemptible``: a policy's Preempt may stop its runs; the ObjectRef is then its resolver's, which
        resolves to the final run's result (see :mod:`ray_adaptive.runtime.preempt`)."""
        future: Future = Future()
        self._enqueue(fields, launch, deadline_s, future, shape, demand, preemptible, wait=False)
        return future

    def call(self, fields: dict, launch: Launch, deadline_s: float = math.inf, shape: Any = None,
             demand: Demand = (), preemptible: bool = False) -> Any:
        """:meth:`submit`, then wait for the ObjectRef (``.remote()``). A decision made in this
        thread returns the ref at once, with no Future; waiting for a local decision, the caller
        harvests completions itself."""
        remote = self.decider.remote
        task = self._enqueue(fields, launch, deadline_s, Future() if remote else None, shape, demand, preemptible,
                             wait=True)
        if task.settled:
            return task.result()
        if task.future is not None and remote:  # decided by the selector: just wait
            return task.future.result()
        with self._cond:
            self.book.waiters += 1
        try:
            while not task.settled:
                if self.harvester.launched:
                    self.harvest(block=self.TICK_S)
                    continue
                with self._cond:  # nothing of ours runs: room must come from elsewhere (a heartbeat)
                    if not task.settled:
                        self._cond.wait(self.TICK_S)
        finally:
            with self._cond:
                self.book.waiters -= 1
        return task.result()

    def _enqueue(self, fields: dict, launch: Launch, deadline_s: float, future: Optional[Future],
                 shape: Any = None, demand: Demand = (), preemptible: bool = False, *, wait: bool) -> RoutedTask:
        """``wait``: the caller waits for the decision (``.remote()``); else the decider may queue the task for
        the dispatcher thread (see :meth:`~ray_adaptive.runtime.decider.Decider.submit`)."""
        if demand and (self.topology.generation, demand) not in self._fitting:
            self._check_fits(demand)
        # (with tasks queued, the dispatcher thread harvests before it decides them: not this caller)
        if time.monotonic() - self.harvester.harvested_at > self.fresh_s and not self.decider.queued:
            self.harvest(block=0.0)
        book = self.book
        with self._cond:
            if self._ray_gone:
                raise RayGoneError(f"Ray was shut down under the runtime of policy {self.policy.name!r}; "
                                   f"after ray.init(), start or attach to it again")
            if self._stopped_elsewhere:
                raise RuntimeError(f"policy {self.policy.name!r} was stopped on the cluster (ray-adaptive stop); "
                                   f"start it or attach to it again")
            if self._closed:
                raise RuntimeError(f"the runtime of policy {self.policy.name!r} is shut down")
            if self._failed is not None:
                raise RuntimeError(f"the dispatcher of policy {self.policy.name!r} failed ({self._failed!r}); "
                                   f"restart the policy") from self._failed
            now = book.decider.now()
            state = TaskState(book.new_id(), now, fields, deadline=now + deadline_s, demand=demand,
                              preemptible=preemptible)
            task = RoutedTask(state, launch, shape, future)
            if future is not None:
                future.task_id = state.id  # type: ignore[attr-defined]  # (what PolicyRuntime.why_pending asks)
            book.tasks[state.id] = task
            if state.deadline < math.inf:
                self.deadlines.add(state.deadline, state.id)
            self.stats.submitted += 1
            if self.monitor is not None:
                self.monitor.arrived(state.arrival, fields)
            if self.gate.frozen:  # a live switch: the next plan's decider takes it
                self.gate.held.append(state)
                chosen = []
            else:
                try:
                    # a local decider decides in the caller's thread, unless the caller goes on at once
                    chosen = book.decider.submit([state], wait=wait)
                except Exception:  # the policy failed on this task at its arrival (undone there): the caller hears
                    del book.tasks[state.id]
                    self.stats.failed += 1
                    raise
            if chosen:  # (claimed under this lock: one lock round less per task)
                claimed, gone, plan = book.claim(chosen, now)
            else:
                self._cond.notify()  # an idle dispatcher thread wakes: a task may wait here now
        if chosen:
            book.fire(claimed, gone, plan)
        return task

    def _check_fits(self, demand: Demand) -> None:
        """Refuse a task whose Ray resources no node of the plan in force has, unless the autoscaler may add
        a node that has them (then it waits: :meth:`explain` says so). Remembered per generation: nodes
        join and leave by live switches."""
        nodes = self.topology.nodes
        if not any(n.runs_tasks and fits(n.resources, demand) for n in nodes):
            types = self.addable_node_types()
            if types is None or not any(fits(t, demand) for t in types):
                largest = max(nodes, key=lambda n: sum(n.resources.get(k, 0.0) for k, _ in demand))
                shown = {k: v for k, v in largest.resources.items() if k in dict(demand) or k == "CPU"}
                grow = ("and no node type of the cluster's autoscaler has them" if types is not None
                        else "and no autoscaler may add one")
                raise InfeasibleTaskError(
                    f"policy {self.policy.name!r}: a task asks for {describe(demand)}: no node of the cluster has "
                    f"them ({len(nodes)} nodes; the closest has {shown}) {grow}; ask for less, or add a node "
                    f"that has them")
        self._fitting.add((self.topology.generation, demand))

    #: the resources of the node types an autoscaler may still add (None: no autoscaler); set by the owner
    addable_node_types: Callable[[], Optional[List[Dict[str, float]]]] = staticmethod(lambda: None)

    # ---------------------------------------------------------------- finish
    def harvest(self, block: float) -> bool:
        """Apply every launched task that has finished -- waiting up to ``block`` s for one if none has --
        and launch what that made room for. False if none had. Any thread may harvest."""
        finished = self.harvester.collect(block)
        if not finished:
            return False
        finished, stopped = self.book.sort_stopped(finished)
        if stopped:
            self._preempted(stopped)
        with self._cond:
            now = self.now()
            chosen = self.book.harvested(finished, now)
        self.book.recorded(finished, now)
        self.book.launch(chosen)
        return True

    def _preempted(self, stopped: List[RoutedTask]) -> None:
        """Runs stopped for a preemption: their tasks wait to be decided again (see
        :meth:`~ray_adaptive.runtime.decider.Decider.preempted`). While a live switch is under way they
        wait at the gate with the finishes: the next plan's decider takes each as running, then stopped."""
        chosen: List[TaskState] = []
        with self._cond:
            if self.gate.frozen:
                self.gate.held_stopped += stopped
                return
            now = self.now()
            wasted = [max(0.0, now - t.dispatched_at) for t in stopped]
            states = self.book.requeue(stopped)
            decider = self.decider
            if not decider.thread_safe:
                chosen = decider.preempted(states)
        if decider.thread_safe:
            chosen = decider.preempted(states)
        if self.monitor is not None:
            self.monitor.preempted(wasted)
        self.book.launch(chosen)

    # ------------------------------------------------- the dispatcher's clock (see runtime.dispatcher)
    def queued(self) -> bool:
        with self._cond:
            return self.decider.queued and not self.gate.frozen

    def waiting_unwatched(self) -> bool:
        with self._cond:
            return self.decider.pending > 0 and not self.book.waiters

    def nap(self, idle_s: float, waiting_s: float) -> None:
        with self._cond:
            if not self._closed:
                self._cond.wait(waiting_s if self.decider.pending else idle_s)

    def tick(self) -> None:
        with self._cond:
            chosen = self.decider.tick() if not (self._closed or self.gate.frozen) else []
        self.book.launch(chosen)

    def expire(self) -> None:
        """Tasks still undecided at their deadline are dropped now (see :mod:`ray_adaptive.runtime.deadlines`)."""
        with self._cond:
            expired = self.deadlines.expire(self.now(), self.book.tasks, self.book.drop)
        if expired:
            self.book.tell(expired)

    def check_nodes(self) -> List[str]:
        """Stop deciding for nodes that died (their slots move: see ``on_dead``). Returns the newly dead."""
        dead = self.membership.newly_dead(self.decider.node_ids())
        for n in dead:
            with self._cond:
                if not self.gate.frozen:  # (frozen: the next plan's decider learns of it when it takes over)
                    self.decider.mark_dead(n)
            self.membership.left(n)
        return dead

    def ping(self, record: Callable[[float], None]) -> None:
        """Time an empty call to the actor the decider talks to (the store or the selector)."""
        if not self.gate.frozen:
            self.decider.ping(record)

    def send_report(self) -> None:
        self.topology.store.report.remote(self.client, self.report())  # (fire and forget)

    def drained(self) -> bool:
        with self._cond:
            return self._closed and (self._abandon or not self.book.running())

    def fail(self, err: BaseException) -> None:
        """The dispatcher thread failed: every task not launched yet fails with the cause, and so does
        every later submission -- none waits forever."""
        logging.getLogger(__name__).error("the dispatcher of policy %r failed", self.policy.name, exc_info=err)
        with self._cond:
            self._failed = err
            left = self.book.settle(lambda t: not t.launched, lambda t: RuntimeError(
                f"the dispatcher of policy {self.policy.name!r} failed ({err!r}) before task {t.state.id} was launched"))
        self.book.tell(left)

    def ray_gone(self) -> None:
        """``ray.shutdown()`` came without ``ra.shutdown()``: stop without another call to Ray (one would
        start a new Ray). Tasks not launched fail with :class:`RayGoneError`, as does every later
        submission; those launched went with Ray."""
        with self._cond:
            self._ray_gone = True
        self._end(lambda t: RayGoneError(
            f"Ray was shut down before task {t.state.id} of policy {self.policy.name!r} was launched"))

    def stopped_elsewhere(self) -> None:
        """The runtime was stopped on the cluster (``ray-adaptive stop``: its store is gone for good) while
        this process was attached: tasks not launched fail, saying so; those launched run on (their
        results are this process's); a later submission is refused, saying so."""
        with self._cond:
            self._stopped_elsewhere = True
        self._end(lambda t: RuntimeError(
            f"policy {self.policy.name!r} was stopped on the cluster (ray-adaptive stop) before task "
            f"{t.state.id} was placed"))

    def _end(self, error: Callable[[RoutedTask], BaseException]) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            left = self.book.settle(lambda t: not t.launched, error)
        self.book.tell(left)
        self.decider.close(switching=True)  # (its thread stops; nothing of ours is left to tell its actors)
        self._release()

    def _release(self) -> None:
        """This router's threads have stopped: Ray may auto-connect again, as far as it is concerned."""
        with self._cond:
            released, self._released = self._released, True
        if not released:
            autoinit.release()

    # ---------------------------------------------------------- live switches
    def freeze(self) -> dict:
        """Stop deciding for a live switch: the decider hands over what it holds (see
        :mod:`ray_adaptive.runtime.switch`); submissions and finishes wait at the gate meanwhile."""
        with self._cond:
            self.gate.close(self.topology.generation)
            decider = self.decider
        if decider.thread_safe:  # (its thread may be launching: it takes this router's lock)
            handover = decider.freeze()
        else:
            with self._cond:
                handover = decider.freeze()
        with self._cond:
            return self.gate.frozen_with(handover, self.book.placed_per_node())

    def resume(self, topology: Topology, seen: Optional[SyncAnswer] = None, decider: Optional[Decider] = None) -> None:
        """Take up the plan a live switch put in force (``seen``: the store's State and loads as of the
        publish; ``decider``: the topology's, made ahead); see :meth:`SwitchGate.hand_over`."""
        new = decider or topology.decider(self.client)
        new.on_decided, new.on_stop = self.book.launch, self.book.stop
        with self._cond:
            old = self.decider
            chosen = self.gate.hand_over(old, new, self.book.live(), topology.rebuild, seen)
            self.book.decider, self.book.generation = new, topology.generation
            self.topology, self.fresh_s = topology, self._freshness(topology)
            stopped, self.gate.held_stopped = self.gate.held_stopped, []
            self._cond.notify_all()
        self.book.launch(chosen)
        old.close(switching=True)
        if stopped:  # (runs stopped during the switch: the new decider took them as running; now they stop)
            self._preempted(stopped)

    def wait_generation(self, generation: int, timeout_s: float = 60.0) -> None:
        """Block until this router has taken up ``generation`` of the plan (a live switch it follows)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.topology.generation >= generation or self._closed, timeout_s):
                raise RuntimeError(f"policy {self.policy.name!r}: generation {generation} not taken up in "
                                   f"{timeout_s:g} s")

    # ------------------------------------------------------------------ state
    closed = property(lambda self: self._closed)

    @property
    def pending(self) -> int:
        """Tasks waiting for a decision (not those dropped at their deadline the scheduler still holds)."""
        with self._cond:
            return max(0, self.decider.pending - self.deadlines.unreached) + len(self.gate.held)

    def decision_latencies(self) -> List[float]:
        """Recent decision latencies (seconds) of the scheduler that decides for this process."""
        if self.decider.thread_safe:  # it may make an RPC: never under our lock
            return self.decider.decision_latencies()
        with self._cond:
            return self.decider.decision_latencies()

    def message_latencies(self) -> List[float]:
        """Round trips (seconds) of the recent pings to the actor the decider talks to, one per
        ``NODE_CHECK_S`` while a monitor is attached."""
        return list(self._dispatcher.message_s)

    def store_latencies(self) -> List[float]:
        """Round trips (seconds) of this process's recent syncs with the state store (none if its
        decisions come from the selector)."""
        with self._cond:
            return self.decider.store_latencies()

    def outstanding(self) -> Dict[str, int]:
        """Tasks this process launched per node, not finished yet."""
        with self._cond:
            return self.book.outstanding()

    def export(self) -> dict:
        """This process's undecided tasks and, for a local decider, its State (for a plan switch)."""
        with self._cond:
            return self.decider.export()

    def report(self) -> dict:
        """What this process reports to its store each second (see :meth:`~ray_adaptive.monitor.Monitor.report`)."""
        assert self.monitor is not None  # (reports are sent only with a monitor)
        with self._cond:
            tally = self.book.tally(self.monitor.group_by)
            generation = self.topology.generation
            latencies = [] if self.decider.thread_safe else self.decider.decision_latencies()[-10_000:]
            demand = self.book.demand()
        return {**self.monitor.report(tally, generation, latencies, self.oldest_pending()), **demand,
                **actor_report(self.policy.name, self._actors_since)}  # (issue 38: this process's policy actors)

    def task_id_of(self, ref: Any) -> Optional[str]:
        """The id of the task whose ObjectRef is ``ref`` (while it runs: finished ones are forgotten)."""
        with self._cond:
            task = self.harvester.launched.get(ref)
            return task.state.id if task is not None else None

    def oldest_pending(self, k: int = 5) -> List[Tuple[str, float]]:
        """The ``k`` tasks waiting longest for a decision here: ``(task id, seconds waiting)``."""
        now = self.now()
        with self._cond:
            return self.book.oldest_pending(now, k)

    def explain(self, task_id: str) -> dict:
        """Why ``task_id`` (submitted from this process) is pending, or why it landed where it did."""
        with self._cond:
            task = self.book.get(task_id)
            frozen, decider = self.gate.frozen, self.decider
        if task is None:
            return {"state": "finished or unknown", "task": task_id,
                    "why": "not pending nor running in this process: finished, dropped, or never submitted"}
        demand = task.state.demand
        if task.state.node is None and demand and not any(n.runs_tasks and fits(n.resources, demand)
                                                           for n in self.topology.nodes):
            return {"state": "pending", "task": task_id, "reason": "waiting-for-node",
                    "why": f"no node of the cluster has the {describe(demand)} it asks for; the autoscaler may "
                           f"add one that has (the policy asks it to): it is decided once such a node joins"}
        if decider.thread_safe:
            return task.explain(frozen, decider.explain)
        with self._cond:
            return task.explain(frozen, decider.explain)

    def close(self, timeout: float = 60.0) -> int:
        """Stop dispatching, cancel what is still undecided (its Future is cancelled, its
        ``.remote()`` raises CancelledError), and wait up to ``timeout`` seconds for dispatched
        tasks to finish. Returns how many were cancelled."""
        if self.watcher is not None:
            self.watcher.stop()
        with self._cond:  # the tasks queued for the dispatcher thread are decided, as a caller's would have been
            chosen = self.decider.tick() if self.decider.queued and not self.gate.frozen else []
        self.book.launch(chosen)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            left = self.book.settle(lambda t: t.node is None, lambda t: CancelledError(  # (not claimed for a launch)
                f"the runtime of policy {self.policy.name!r} was shut down before task {t.state.id} was placed"))
        for t in left:
            if t.future is not None:
                t.future.cancel()
        if timeout <= 0:  # (Ray is about to go: running tasks are not waited for, the thread is)
            self._abandon = True
        self._dispatcher.join(timeout=max(timeout, 2.0) if self._abandon else timeout)
        with self._cond:
            self.book.free_unlaunched()
        if not ray.is_initialized() or self._abandon:
            # (Ray went first: a call now would start it again. Or Ray is about to go: this process's running
            # tasks go with it, and it does not leave the runtime as if they had finished -- their share of
            # State stays until the owner sees the job end and takes it out, exactly)
            self.decider.close(switching=True)
            self._release()
            return len(left)
        self.decider.close()
        self.book.close_runs()
        try:
            self.topology.store.leave.remote(self.client)
        except Exception:
            pass  # the store is gone (its runtime shut down)
        self._release()
        return len(left)
