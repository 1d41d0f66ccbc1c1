"""The policy's backlog, told to Ray's autoscaler.

Tasks the policy holds while every node is full (``hold="caller"``) wait in
the submitting process, not in Ray's queue: Ray's autoscaler, which grows a
cluster from the demand it sees queued, never sees them. :class:`DemandReporter`,
a thread in the runtime's owner (the process that started it, or the policy
service), reads every attached process's report from the store each
``PERIOD_S`` and tells the autoscaler through
``ray.autoscaler.sdk.request_resources(bundles=...)``.

What is asked (:func:`demand_bundles`), given how that call works:

- It is **one standing request for the whole cluster**: each call replaces the
  last (from any caller in the cluster), and it never expires. So it is sent
  only when the backlog changes, and **cleared** (``bundles=[]``) as soon as no
  task is held -- a request left standing keeps its nodes from ever being
  removed as idle -- and when the reporter stops.
- It asks the cluster to be able to hold all the bundles **at once**, counted
  against every node's total resources as if idle (autoscaler v1 bin-packs the
  request onto the nodes' totals; v2 schedules it as a cluster resource
  constraint the same way): what already runs is inside the request, not in
  addition to it. Asking for the held tasks alone would be met by the nodes
  busy running the tasks before them, and nothing would be added. So the
  bundles are the held tasks **merged with those running**, one bundle per
  task, as Ray Data's autoscaling coordinator merges its requesters' bundles
  into one call.

The request is cut to ``max_bundles`` (a held backlog of 100,000 tasks needs no
100,000-entry request to bring the cluster to its maximum): the running tasks
are kept and the held ones trimmed, each shape keeping its share.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

import ray

from ray_adaptive.runtime import background
from ray_adaptive.runtime.background import Periodic
from ray_adaptive.runtime.messages import Actor

__all__ = ["DemandReporter", "demand_bundles", "shape_counts", "MAX_BUNDLES"]

MAX_BUNDLES = 5000

Shape = Tuple[Tuple[str, float], ...]  # a task's Ray resources, sorted: hashable and ordered


def _shape(resources: Mapping[str, Any]) -> Shape:
    return tuple(sorted((str(k), float(v)) for k, v in resources.items() if float(v) > 0))


def shape_counts(entries: Iterable[Any]) -> Dict[Shape, int]:
    """``[[{resource: amount}, count], ...]`` (a report's ``held`` or ``running``) summed by shape.
    Entries with no resources (a 0-CPU task asks the autoscaler for nothing) or no count are left out."""
    out: Dict[Shape, int] = {}
    for entry in entries or ():
        resources, count = entry
        shape = _shape(resources)
        if shape and int(count) > 0:
            out[shape] = out.get(shape, 0) + int(count)
    return out


def demand_bundles(reports: Mapping[str, Mapping[str, Any]], max_bundles: int = MAX_BUNDLES) -> List[Dict[str, float]]:
    """The bundles to request from the autoscaler for the processes' ``reports`` ({client: report}, each
    with ``held`` and ``running`` as ``[[{resource: amount}, count], ...]``): ``[]`` when no task is
    held; else one bundle per running task and per held task (see the module doc), running first,
    shapes in sorted order, cut to ``max_bundles`` by trimming the held shapes in proportion (each keeps
    at least one)."""
    if max_bundles < 1:
        raise ValueError(f"max_bundles must be >= 1, got {max_bundles}")
    held: Dict[Shape, int] = {}
    running: Dict[Shape, int] = {}
    for report in reports.values():
        for shape, n in shape_counts(report.get("held") or ()).items():
            held[shape] = held.get(shape, 0) + n
        for shape, n in shape_counts(report.get("running") or ()).items():
            running[shape] = running.get(shape, 0) + n
    if not held:
        return []
    total_held, total_running = sum(held.values()), sum(running.values())
    held_room = min(total_held, max(max_bundles - total_running, len(held)))
    if total_held > held_room:
        held = {s: max(1, math.floor(n * held_room / total_held)) for s, n in held.items()}
    run_room = max(0, max_bundles - sum(held.values()))
    out: List[Dict[str, float]] = []
    for shape in sorted(running):
        take = min(running[shape], run_room - len(out))
        out.extend(dict(shape) for _ in range(take))
    for shape in sorted(held):
        out.extend(dict(shape) for _ in range(held[shape]))
    return out


def _request_resources(bundles: List[Dict[str, float]]) -> None:
    from ray.autoscaler.sdk import request_resources

    request_resources(bundles=bundles)


class DemandReporter:
    """The thread (see the module doc). ``request(bundles)`` sends a request (default: Ray's
    ``request_resources``); ``stop()`` returns within ``background.POLL_S`` plus a request in flight,
    clearing a standing request while Ray is up."""

    PERIOD_S = 1.0

    def __init__(self, store: Actor, name: str, period_s: float = PERIOD_S, max_bundles: int = MAX_BUNDLES,
                 request: Optional[Callable[[List[Dict[str, float]]], None]] = None) -> None:
        self._store, self._period, self._max = store, float(period_s), int(max_bundles)
        self._request = request or _request_resources
        self.sent: Optional[List[Dict[str, float]]] = None  # the request standing from this reporter
        self.calls = 0  # requests sent (clears included)
        self._thread = Periodic(self.check, f"ra-demand-{name}", self._period,
                                "telling the autoscaler the policy's backlog", at_end=self._clear)

    def stop(self, timeout: float = 5.0) -> None:
        self._thread.stop(timeout)

    def _alive(self) -> bool:
        return self._thread.alive()

    def _clear(self) -> None:
        """The runtime stops: its backlog goes with it."""
        if self.sent:
            self._send([])

    def _loads(self) -> Optional[Dict[str, dict]]:
        """The store's reports, or None when stopped (waited for in steps: stop is seen within POLL_S)."""
        ref = self._store.loads.remote()
        while self._alive():
            if background.get_ready(ref, background.POLL_S):
                return ray.get(ref)
        return None

    def _send(self, bundles: List[Dict[str, float]]) -> None:
        self._request(bundles)
        self.calls += 1
        self.sent = bundles

    def check(self) -> Optional[List[Dict[str, float]]]:
        """Read the reports and send the request if it changed; return what was sent (None: nothing)."""
        reports = self._loads()
        if reports is None:
            return None
        bundles = demand_bundles(reports, self._max)
        if bundles == (self.sent or []):
            return None
        if not self._alive():
            return None
        self._send(bundles)
        return bundles
