"""The adaptive runtime: ``ra.start(policy, plan="adaptive")`` keeps the plan fit for the measured load.

In the process that started the runtime, a thread evaluates the
:class:`~ray_adaptive.control.Controller` every ``every_s`` on the cluster's
load -- every submitting process reports its monitor's counters to the
state store each second; two snapshots ``window_s`` apart give the rate,
burstiness and task durations summed over processes -- and switches the
plan live when the controller says so (:meth:`PolicyRuntime.switch`).

The controller looks its estimates up in a table the compiler computes
ahead, for this cluster, in a Ray task this thread waits for
(:func:`ray_adaptive.compiler.estimate_table`):
first on the compiler's default workload for the policy, then again on the
recorded workload whenever the measured mean task duration drifts more than
``REFRESH_DRIFT`` from the one the table was computed for. No evaluation
waits for a compile, and nothing runs on the submission path.

The measurement includes the cluster's size: the nodes of the plan in force
that run tasks, and their executors (``cluster()``, read at each
evaluation: nodes join and leave live). When the size moves, the table for
the new size is computed the same way (on the workload the table in use was
computed on; one per size is kept, so a cluster that scales out and back in
computes each once), the controller keeps the plan in force meanwhile, and
then it judges the plans at the new size by the same rules.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Protocol, Sequence, Tuple

import ray

from ray_adaptive._private import autoinit
from ray_adaptive.control import Controller, EstimateTable, Measurement, Settings, Verdict
from ray_adaptive.plan import Plan
from ray_adaptive.workload.specs import TaskSpec

__all__ = ["ControlLoop", "ControlledRuntime", "measure"]

log = logging.getLogger("ray_adaptive")

REFRESH_DRIFT = 0.25  # recompute the table when the measured mean duration drifts this much from its basis...
REFRESH_AGREE = 5  # ...on this many evaluations in a row (a cold start's slow first tasks are no drift)...
REFRESH_EVERY_S = 30.0  # ...and at most this often
MIN_FINISHED = 50  # tasks recorded before a table is computed on them


def measure(then: Tuple[float, Dict[str, dict]], now: Tuple[float, Dict[str, dict]]) -> Optional[Measurement]:
    """The cluster's load between two snapshots of the processes' reports (``(monotonic time, {client: load})``):
    arrivals and finishes summed over the processes in both, per second of each one's own clock.

    Example:
        >>> a = {"p": {"t": 0.0, "arrivals": 0, "finished": 0, "duration_s": 0.0, "burstiness": 1.0}}
        >>> b = {"p": {"t": 2.0, "arrivals": 100, "finished": 90, "duration_s": 4.5, "burstiness": 1.2}}
        >>> m = measure((10.0, a), (12.0, b))
        >>> m.rate, m.duration_s, m.burstiness, m.placed
        (50.0, 0.05, 1.2, None)
    """
    (t0, before), (t1, after) = then, now
    rate = finished = duration = weighted_burst = 0.0
    placed: Optional[float] = 0.0
    for client, load in after.items():
        old = before.get(client)
        if old is None or load["t"] <= old["t"]:
            continue
        span = load["t"] - old["t"]
        r = (load["arrivals"] - old["arrivals"]) / span
        rate += r
        finished += load["finished"] - old["finished"]
        duration += load["duration_s"] - old["duration_s"]
        weighted_burst += r * (load.get("burstiness") or 1.0)
        if placed is not None and "groups" in load and "groups" in old:
            placed += sum(g["decided"] - old["groups"].get(name, {}).get("decided", 0)
                          for name, g in load["groups"].items()) / span
        else:
            placed = None  # (a report without its groups' counts: not measured)
    if t1 <= t0:
        return None
    return Measurement(time=t1, rate=rate, burstiness=weighted_burst / rate if rate > 0 else 1.0,
                       duration_s=duration / finished if finished >= 1 else None, placed=placed)


def _size_key(nodes: Sequence[Any]) -> tuple:
    """A cluster's size as the estimates see it: its nodes' (executors, queue), in order of size."""
    return tuple(sorted((n.executors, getattr(n, "queue", 0)) for n in nodes))


class ControlledRuntime(Protocol):
    """What the control loop drives: the runtime of the process that started the policy
    (:class:`~ray_adaptive.api.PolicyRuntime`)."""

    @property
    def name(self) -> str: ...

    @property
    def plan(self) -> Plan:
        """The plan in force."""
        ...

    def cluster_loads(self) -> Dict[str, dict]:
        """Every submitting process's last load report (see :meth:`~ray_adaptive.monitor.Monitor.load`)."""
        ...

    def recorded_tasks(self, since: float) -> List[TaskSpec]:
        """The tasks this process saw finish that arrived at ``since`` (runtime time) or later, as they ran."""
        ...

    def clock(self) -> float:
        """The runtime's time now (seconds since it began)."""
        ...

    def show_evaluation(self, evaluation: dict, estimated_goodput: Optional[float]) -> None:
        """Tell operators the controller's last evaluation (``ray-adaptive status``, the metrics)."""
        ...

    def switch(self, plan: Plan, reason: str = "forced", *, estimates: Optional[dict] = None,
               measured: Optional[dict] = None) -> dict:
        """Switch live (the runtime then calls :meth:`ControlLoop.switched`)."""
        ...


class ControlLoop:
    """The loop of an adaptive runtime (see the module doc); stopped by the runtime's shutdown."""

    def __init__(self, rt: ControlledRuntime, settings: Settings,
                 table_for: Callable[..., EstimateTable],
                 table: Optional[EstimateTable] = None,
                 cluster: Optional[Callable[[], Sequence[Any]]] = None):
        """``table_for(trace, cluster=None)``: the compiler's estimate table on ``trace`` (task specs;
        None: the default workload) for ``cluster`` (node records with ``executors`` and ``queue``; None:
        the cluster now). ``cluster()``: the nodes of the plan in force that run tasks, now (None: the
        size is not followed, and ``table_for`` is called with the trace alone)."""
        self.rt = rt
        self.settings = settings
        self._table_for = table_for
        self._cluster = cluster
        self.table = table
        self._trace: Optional[Sequence[TaskSpec]] = None  # the workload the table in use was computed on
        self._tables: Dict[tuple, EstimateTable] = {}  # by the cluster's size (see _size_key)
        self.controller: Optional[Controller] = None
        self.evaluations: Deque[Verdict] = deque(maxlen=1000)
        self._snapshots: Deque[Tuple[float, Dict[str, dict]]] = deque()
        self._stop = threading.Event()
        self._drifting = 0  # evaluations in a row whose measured duration drifted from the table's
        self._refreshed_at = time.monotonic()
        self.failed: Optional[BaseException] = None
        autoinit.hold()  # (released when the thread ends: no call of it may start Ray)
        self._thread = threading.Thread(target=self._run, name=f"ra-adapt-{rt.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def switched(self, to: str, pause_s: Optional[float] = None) -> None:
        """A switch happened (decided here or forced by an operator; the runtime tells of both): the
        controller dwells from now."""
        if self.controller is not None:
            self.controller.switched(to, time.monotonic(), pause_s)

    def _run(self) -> None:
        try:
            nodes = self._nodes()
            if self.table is None:
                self.table = self._compute(None, nodes)
            elif nodes is not None and self.table.fits(len(nodes), sum(n.executors for n in nodes)):
                self._tables[_size_key(nodes)] = self.table  # (a table given for this cluster)
            self.controller = Controller(self.table, self.settings, self.rt.plan.name, now=time.monotonic())
            while self._wait(self.settings.every_s):
                self._step()
        except BaseException as err:  # (logged; the runtime goes on with the plan in force)
            self.failed = err
            if not self._stop.is_set() and ray.is_initialized():  # (Ray shut down under it: it stops quietly)
                log.exception("ray-adaptive: the adaptive controller of policy %r stopped", self.rt.name)
        finally:
            autoinit.release()

    def _wait(self, seconds: float) -> bool:
        """Sleep ``seconds``; False as soon as the loop is stopped or Ray was shut down (looked at every
        0.2 s: a thread of the library outlives ``ray.shutdown()`` by a second at most, and a call after
        it would start Ray again)."""
        deadline = time.monotonic() + seconds
        while True:
            if self._stop.wait(min(0.2, max(0.0, deadline - time.monotonic()))) or not ray.is_initialized():
                return False
            if time.monotonic() >= deadline:
                return True

    def _snapshot(self) -> Optional[Measurement]:
        loads = self.rt.cluster_loads()
        now = time.monotonic()
        self._snapshots.append((now, loads))
        while len(self._snapshots) > 2 and now - self._snapshots[1][0] >= self.settings.window_s:
            self._snapshots.popleft()
        if now - self._snapshots[0][0] < 0.5 * self.settings.window_s:
            return None  # not yet a window's worth of reports
        return measure(self._snapshots[0], self._snapshots[-1])

    def _nodes(self) -> Optional[List[Any]]:
        return list(self._cluster()) if self._cluster is not None else None

    def _compute(self, trace: Optional[Sequence[TaskSpec]], nodes: Optional[List[Any]]) -> EstimateTable:
        """The table on ``trace`` for ``nodes`` (None: as ``table_for`` sees the cluster), kept by size."""
        table = self._table_for(trace) if self._cluster is None else self._table_for(trace, cluster=nodes)
        self._trace = trace
        if nodes is not None:
            self._tables[_size_key(nodes)] = table
        return table

    def _follow_size(self, m: Measurement) -> Measurement:
        """The measurement with the cluster's size; the table for that size put in use (computed if no
        table for it is kept: the evaluation waits for it, as the first table's)."""
        nodes = self._nodes()
        if nodes is None:
            return m
        m = dataclasses.replace(m, nodes=len(nodes), executors=sum(n.executors for n in nodes))
        assert self.controller is not None and self.table is not None
        if self.table.fits(m.nodes, m.executors):
            return m
        before = self.table.nodes
        table = self._tables.get(_size_key(nodes))
        if table is None:
            table = self._compute(self._trace, nodes)
        self.table = table
        self.controller.use(table)
        log.info("ray-adaptive: policy %r's cluster went from %d to %d nodes (%d executors): estimates for "
                 "the new size in use", self.rt.name, before, m.nodes, m.executors)
        return m

    def _step(self) -> None:
        m = self._snapshot()
        if m is None:
            return
        assert self.controller is not None and self.table is not None  # (made before the first step)
        m = self._follow_size(m)
        verdict = self.controller.evaluate(m)
        self.evaluations.append(verdict)
        estimate = verdict.estimates.get(verdict.current)
        self.rt.show_evaluation({"reason": verdict.reason, "measured": verdict.measured,
                                 "candidate": verdict.candidate, "estimate": estimate},
                                (estimate or {}).get("goodput"))
        if verdict.switch_to is not None and verdict.switch_to.name == self.rt.plan.name:
            self.switched(self.rt.plan.name)  # (a forced switch put it in force since the evaluation began)
        elif verdict.switch_to is not None:
            try:
                self.rt.switch(verdict.switch_to, reason=verdict.reason, estimates=verdict.estimates,
                               measured=verdict.measured)
            except Exception:  # (e.g. a forced switch put that plan in force meanwhile: evaluate again)
                log.warning("ray-adaptive: the controller of policy %r could not switch to %s", self.rt.name,
                            verdict.switch_to.name, exc_info=True)
                self.switched(self.rt.plan.name)
        self._maybe_refresh(m)

    def _maybe_refresh(self, m: Measurement) -> None:
        """A table computed for other task durations than the measured ones is computed again, on the
        recorded workload (this process's monitor: a sample of the cluster's)."""
        assert self.controller is not None and self.table is not None
        basis = self.table.basis.get("duration_mean_s")
        drifted = m.duration_s is not None and basis and abs(m.duration_s - basis) > REFRESH_DRIFT * basis
        self._drifting = self._drifting + 1 if drifted else 0
        if self._drifting < REFRESH_AGREE or time.monotonic() - self._refreshed_at < REFRESH_EVERY_S:
            return
        self._drifting, self._refreshed_at = 0, time.monotonic()
        trace = self._recorded()
        if len(trace) < MIN_FINISHED:
            return
        self._tables.clear()  # (the tables of other sizes were computed for the old durations)
        self.table = self._compute(trace, self._nodes())
        self.controller.use(self.table)
        log.info("ray-adaptive: policy %r's estimates recomputed for tasks of %.3f s (were %.3f s)",
                 self.rt.name, m.duration_s, basis)

    def _recorded(self) -> List[TaskSpec]:
        """The recent recorded workload (at most 2,000 tasks, in arrival order); no task of zero duration."""
        since = self.rt.clock() - self.settings.window_s * REFRESH_AGREE
        tasks = sorted(self.rt.recorded_tasks(since), key=lambda t: (t.arrival, t.id))[-2000:]
        return [t if t.duration > 0 else dataclasses.replace(t, duration=1e-6) for t in tasks]
