"""The caller-side router: policy decisions made in the submitting process.

Like Ray Serve's router, the decision runs where the task is submitted, on
the policy's State, so no actor sits in the launch path: ``submit`` puts the
task in the pending queue, and the router dispatches (pending task, candidate
node) pairs by the policy's Score -- the same :class:`Interpreter` and tie
rules as the ideal scheduler -- submitting each chosen task itself with its
node's slot resource. The caller owns every result, as with plain Ray.

The cluster model is the one of :mod:`ray_adaptive.sim.model`: a node is a
candidate while its outstanding tasks (queued + running, counted from this
router's dispatches and their completions) are below ``executors + queue``.
A completion (``ObjectRef.future()`` callback) frees the slot, runs
``OnFinish`` and wakes the dispatcher thread.
"""

from __future__ import annotations

import bisect
import itertools
import queue
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional

from ray_adaptive.dsl.interp import Interpreter, argmin_pair
from ray_adaptive.dsl.ir import Policy
from ray_adaptive.monitor import Monitor, TaskRecord
from ray_adaptive.runtime.binding import SlotBinding


@dataclass
class _Node:
    """A node as the policy sees it (the interpreter's NodeView)."""

    id: str
    index: int
    executors: int
    queue: int
    resources: dict
    fields: dict = field(default_factory=dict)
    load: int = 0  # outstanding tasks this router sent here
    alive: bool = True

    @property
    def available(self) -> dict:
        return self.resources

    @property
    def has_room(self) -> bool:
        return self.alive and self.load < self.executors + self.queue


@dataclass
class _Task:
    """A submitted task waiting for, or past, its decision (the interpreter's TaskView)."""

    id: str
    arrival: float
    fields: dict
    launch: Callable[[str], Any]  # node id -> ObjectRef of the task submitted there
    future: Future = field(default_factory=Future)
    node: Optional[_Node] = None
    dispatched_at: float = 0.0
    launched: bool = False  # False if Ray refused the submission


@dataclass
class RouterStats:
    submitted: int = 0
    dispatched: int = 0
    finished: int = 0
    # seconds per decision, the most recent ones only: a runtime lives for days
    decision_s: Deque[float] = field(default_factory=lambda: deque(maxlen=100_000))


class Router:
    """Pending queue + policy + binding for one policy in one process."""

    NODE_CHECK_S = 1.0  # how often the dispatcher thread looks for dead nodes

    def __init__(self, policy: Policy, nodes: List[_Node], binding: SlotBinding, record_latency: bool = True,
                 alive_nodes: Optional[Callable[[], set]] = None, monitor: Optional[Monitor] = None,
                 metrics_every_s: Optional[float] = None):
        self.policy = policy
        self.nodes = nodes
        self.binding = binding
        self.interp = Interpreter(policy, num_nodes=len(nodes))
        self.stats = RouterStats()
        self._record = record_latency
        self._alive_nodes = alive_nodes
        self.monitor = monitor
        self._metrics_every = metrics_every_s
        self._next_metrics = time.monotonic() + (metrics_every_s or 0.0)
        self._next_node_check = time.monotonic() + self.NODE_CHECK_S
        self._pending: List[_Task] = []
        self._keys: List[tuple] = []
        self._ids = itertools.count()
        self._t0 = time.monotonic()
        self._cond = threading.Condition()
        # completions arrive on Ray's callback thread, which must never wait for our
        # lock (the submitting thread holds it while calling .remote()): they are
        # handed to the dispatcher thread through this lock-free queue
        self._done: "queue.SimpleQueue[_Task]" = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"ra-router-{policy.name}", daemon=True)
        self._thread.start()

    def now(self) -> float:
        return time.monotonic() - self._t0

    # ---------------------------------------------------------------- submit
    def submit(self, fields: dict, launch: Callable[[str], Any]) -> Future:
        """Queue a task; the Future resolves to its ObjectRef once it is dispatched."""
        with self._cond:
            if self._closed:
                raise RuntimeError(f"the runtime of policy {self.policy.name!r} is shut down")
            task = _Task(f"t{next(self._ids):09d}", self.now(), fields, launch)
            key = (task.arrival, task.id)
            i = bisect.bisect_right(self._keys, key)
            self._keys.insert(i, key)
            self._pending.insert(i, task)
            self.stats.submitted += 1
            if self.monitor is not None:
                self.monitor.arrived(task.arrival, fields)
            self.interp.run_hook("OnArrival", task, None, task.arrival)
            chosen = self._decide()  # the fast path: decide in the caller's thread
        self._launch(chosen)
        return task.future

    # -------------------------------------------------------------- decisions
    def _decide(self) -> List[_Task]:
        """Bind (pending task, candidate node) pairs while a feasible one exists. Holds the lock."""
        chosen = []
        while self._pending:
            candidates = [n for n in self.nodes if n.has_room]
            if not candidates:
                break
            start = time.perf_counter()
            now = self.now()
            pick = argmin_pair(self.interp.score_matrix(self._pending, candidates, now))
            if pick is None:
                break
            i, j = pick
            task, node = self._pending[i], candidates[j]
            del self._pending[i], self._keys[i]
            node.load += 1
            task.node, task.dispatched_at = node, now
            self.interp.run_hook("OnDispatch", task, node, now)
            if self._record:
                self.stats.decision_s.append(time.perf_counter() - start)
            chosen.append(task)
        return chosen

    def _launch(self, tasks: List[_Task]) -> None:
        """Submit decided tasks to Ray -- outside the lock, so that deciding and
        submitting overlap between the caller's thread and the dispatcher."""
        for task in tasks:
            try:
                ref = task.launch(task.node.id)
            except BaseException as err:  # a bad argument or option: the caller gets the error
                self._done.put(task)
                task.future.set_exception(err)
                continue
            task.launched = True
            with self._cond:
                self.stats.dispatched += 1
            task.future.set_result(ref)
            ref.future().add_done_callback(lambda _f, t=task: self._done.put(t))

    def _apply_completions(self, block: float) -> bool:
        """Take finished tasks off the queue (waiting up to ``block`` s for one), release
        their slots, run OnFinish, and launch what that made room for. False if none came."""
        try:
            finished = [self._done.get(timeout=block)]
        except queue.Empty:
            return False
        while True:
            try:
                finished.append(self._done.get_nowait())
            except queue.Empty:
                break
        with self._cond:
            now = self.now()
            for task in finished:
                task.node.load -= 1
                self.interp.run_hook("OnFinish", task, task.node, now)
                if not task.launched:  # Ray refused it: the caller has the error
                    continue
                self.stats.finished += 1
                if self.monitor is not None:
                    self.monitor.finished(TaskRecord(task.id, task.arrival, task.dispatched_at, now, task.node.id, task.fields))
            chosen = [] if self._closed else self._decide()
        self._launch(chosen)
        return True

    def wait(self, future: Future):
        """The ObjectRef of a submitted task, once placed. A caller blocked here applies
        completions itself: one thread hand-off per task instead of two."""
        while not future.done():
            self._apply_completions(block=0.005)
        return future.result()

    def check_nodes(self) -> List[str]:
        """Stop deciding for nodes that died and move their slots to live nodes (the
        least loaded), so that no task bound to a dead node is lost. Returns the dead."""
        if self._alive_nodes is None:
            return []
        alive = self._alive_nodes()
        with self._cond:
            dead = [n for n in self.nodes if n.alive and n.id not in alive]
            for n in dead:
                n.alive = False
            hosts = [n for n in self.nodes if n.alive]
        for n in dead:
            if hosts:
                host = min(hosts, key=lambda h: (h.load, h.index))
                self.binding.rehome(n.id, host.id)
        return [n.id for n in dead]

    def _run(self) -> None:
        """The dispatcher thread: completions while no caller is waiting in :meth:`wait`,
        and, every NODE_CHECK_S, dead nodes."""
        while True:
            self._apply_completions(block=0.05)
            if time.monotonic() >= self._next_node_check:
                self._next_node_check = time.monotonic() + self.NODE_CHECK_S
                self.check_nodes()
            if self._metrics_every and self.monitor is not None and time.monotonic() >= self._next_metrics:
                self._next_metrics = time.monotonic() + self._metrics_every
                self.monitor.export(self)
            with self._cond:
                if self._closed and not any(n.load for n in self.nodes):
                    return

    # ------------------------------------------------------------------ state
    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._pending)

    def decision_latencies(self) -> List[float]:
        """A copy of the recent decision latencies (seconds), taken under the lock."""
        with self._cond:
            return list(self.stats.decision_s)

    def outstanding(self) -> Dict[str, int]:
        with self._cond:
            return {n.id: n.load for n in self.nodes}

    def close(self, timeout: float = 60.0) -> List[Future]:
        """Stop dispatching, cancel what is still pending (returning those futures),
        and wait up to ``timeout`` seconds for dispatched tasks to finish."""
        with self._cond:
            self._closed = True
            left = [t.future for t in self._pending]
            for f in left:
                f.cancel()
            self._pending.clear()
            self._keys.clear()
        self._thread.join(timeout=timeout)
        return left
