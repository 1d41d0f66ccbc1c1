"""Preemptible tasks on Ray: stopping a run, and the caller's ref that survives it (issue 39).

The part of preemption that is Ray's business, apart from any policy: a task whose runs may be stopped
and started again, whose caller holds one ``ObjectRef`` that resolves to the result of its *final* run
-- never to the cancellation of an earlier one. What chooses a victim and when (a policy's Preempt, on
the selector: :mod:`ray_adaptive.runtime.selector_preempt`) and what State does (OnPreempt) are not
here; a submitting process's :class:`~ray_adaptive.runtime.task_book.TaskBook` launches its preemptible
tasks' runs through this module and stops them on the selector's word (docs/language.md, *On Ray*).

* :class:`PreemptibleRuns` (in the submitting process) launches a task's runs, stops the current one
  (:meth:`~PreemptibleRuns.preempt`: ``ray.cancel(force=True)`` -- Ray never retries a cancelled task,
  and the worker dies, so nothing of the body runs after it), tells how a run ended
  (:meth:`~PreemptibleRuns.outcome`: *finished*, *preempted* or *failed*) and launches the next.
* Each caller's ref is a call on one small async actor per process, the *resolver*: it awaits the
  task's runs in turn and returns the first outcome that is not a preemption the process asked for.
  A run is marked preempted at the resolver *before* it is cancelled, so the resolver never mistakes
  the cancellation for the task's own failure; a run that finished before the cancel reached it is a
  finish, at the process and at the resolver alike (both read the same ref).

Only preemptible tasks pay for this: the resolver's call (the result copied once through it).

Example (on a running Ray)::

    runs = PreemptibleRuns()
    ref = runs.submit("t1", lambda: work.remote(1))     # the caller's ref
    runs.preempt("t1")                                   # stop the current run
    assert runs.outcome("t1") == "preempted"
    runs.relaunch("t1", lambda: work.remote(1))          # the policy placed it again
    ray.get(ref)                                          # the final run's result
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import ray
from ray.exceptions import TaskCancelledError, WorkerCrashedError

__all__ = ["PreemptibleRuns", "FINISHED", "PREEMPTED", "FAILED"]

FINISHED, PREEMPTED, FAILED = "finished", "preempted", "failed"
#: How a stopped run ends, as Ray reports it (force=True kills the worker: either, by Ray's version).
_STOPPED = (TaskCancelledError, WorkerCrashedError)


class _Resolver:
    """Per task: its runs' refs in order and which were preempted; ``result`` returns the final run's."""

    def __init__(self) -> None:
        self._runs: Dict[str, List[ray.ObjectRef]] = {}
        self._preempted: Dict[str, set] = {}
        self._changed: Dict[str, asyncio.Event] = {}

    def _event(self, task_id: str) -> asyncio.Event:
        ev = self._changed.get(task_id)
        if ev is None:
            ev = self._changed[task_id] = asyncio.Event()
        return ev

    async def add_run(self, task_id: str, run: int, refs: list) -> None:
        """Run ``run`` of ``task_id`` is ``refs[0]`` (in a list: Ray passes the ref, not its value)."""
        runs = self._runs.setdefault(task_id, [])
        if run != len(runs):
            raise ValueError(f"task {task_id!r}: run {run} registered after {len(runs)} runs")
        runs.append(refs[0])
        self._event(task_id).set()

    async def preempting(self, task_id: str, run: int) -> None:
        """Run ``run`` of ``task_id`` is about to be cancelled on purpose: its cancellation is no outcome."""
        self._preempted.setdefault(task_id, set()).add(run)

    async def result(self, task_id: str):
        """The value of the first run that ends otherwise than by a preemption (or its own error)."""
        run = 0
        try:
            while True:
                runs = self._runs.get(task_id, [])
                if run >= len(runs):  # not launched yet: wait for the process to register it
                    ev = self._event(task_id)
                    ev.clear()
                    await ev.wait()
                    continue
                try:
                    return await runs[run]
                except _STOPPED:
                    if run in self._preempted.get(task_id, ()):
                        run += 1
                        continue
                    raise
        finally:  # (the caller has its answer: the refs held for it can go)
            self._runs.pop(task_id, None)
            self._preempted.pop(task_id, None)
            self._changed.pop(task_id, None)


class PreemptibleRuns:
    """A submitting process's preemptible tasks: their runs, the resolver their callers' refs are on.

    Thread-safe (a lock around its own book; Ray is called outside it)."""

    def __init__(self, actor_options: Optional[dict] = None):
        """``actor_options``: for the resolver actor (default: no CPU, many concurrent calls: one per
        task waiting for its final run)."""
        opts = {"num_cpus": 0, "max_concurrency": 10_000, **(actor_options or {})}
        self._resolver: Any = ray.remote(_Resolver).options(**opts).remote()  # (an actor handle)
        self._lock = threading.Lock()
        self._current: Dict[str, Tuple[int, ray.ObjectRef]] = {}  # task id -> (run number, its ref)
        self._stopping: Dict[str, int] = {}  # task id -> the run being preempted

    def submit(self, task_id: str, launch: Callable[[], ray.ObjectRef]) -> ray.ObjectRef:
        """Launch run 0 (``launch()`` submits it and returns its ref); return the caller's ref."""
        with self._lock:
            if task_id in self._current:
                raise ValueError(f"task {task_id!r} was already submitted; a new run is relaunch()'s")
        ref = launch()
        with self._lock:
            self._current[task_id] = (0, ref)
        self._resolver.add_run.remote(task_id, 0, [ref])
        return self._resolver.result.remote(task_id)

    def current(self, task_id: str) -> Tuple[int, ray.ObjectRef]:
        """The run in progress (its number, its ref)."""
        with self._lock:
            return self._current[task_id]

    def preempt(self, task_id: str) -> Optional[int]:
        """Stop the current run of ``task_id`` (marked at the resolver first); return its number -- None if
        the task is not in progress here (its end was told already). A run that has already finished
        is not stopped: :meth:`outcome` says *finished*."""
        with self._lock:
            if task_id not in self._current:
                return None
            run, ref = self._current[task_id]
        ray.get(self._resolver.preempting.remote(task_id, run))  # (before the cancel can end the run)
        with self._lock:
            self._stopping[task_id] = run
        ray.cancel(ref, force=True)
        return run

    def outcome(self, task_id: str, timeout: Optional[float] = None) -> Optional[str]:
        """How the current run ended -- *finished*, *preempted* (a run this process stopped) or *failed*
        (its own error, or a crash it did not ask for) -- or None if it has not ended within
        ``timeout``. A finished or failed task is forgotten here (its caller's ref has the answer)."""
        run, ref = self.current(task_id)
        ready, _ = ray.wait([ref], timeout=timeout)
        if not ready:
            return None
        try:
            ray.get(ref)
            verdict = FINISHED
        except _STOPPED:
            with self._lock:
                verdict = PREEMPTED if self._stopping.get(task_id) == run else FAILED
        except Exception:  # noqa: BLE001 -- the task's own error: its caller's ref raises it
            verdict = FAILED
        if verdict != PREEMPTED:
            with self._lock:
                self._current.pop(task_id, None)
                self._stopping.pop(task_id, None)
        return verdict

    def forget(self, task_id: str) -> None:
        """The current run of ``task_id`` ended and no stop was asked for it (its caller's ref has the
        answer): nothing more to track."""
        with self._lock:
            self._current.pop(task_id, None)
            self._stopping.pop(task_id, None)

    def relaunch(self, task_id: str, launch: Callable[[], ray.ObjectRef]) -> int:
        """Launch the next run of a preempted task; return its number."""
        with self._lock:
            if task_id not in self._current:
                raise ValueError(f"task {task_id!r} is not in progress here (finished, failed, or never submitted)")
            run, _ = self._current[task_id]
            if self._stopping.get(task_id) != run:
                raise ValueError(f"task {task_id!r}: run {run} was not preempted; only a preempted task runs again")
        ref = launch()
        with self._lock:
            self._current[task_id] = (run + 1, ref)
        self._resolver.add_run.remote(task_id, run + 1, [ref])
        return run + 1

    def close(self) -> None:
        """End the resolver (callers still waiting get an actor-died error)."""
        ray.kill(self._resolver)
