"""The monitor: what a running policy sees of its workload, for people and for the compiler.

A :class:`Monitor` is fed by the runtime's router (arrivals, decisions,
completions) and gives:

* :meth:`Monitor.snapshot` -- per tenant (or any task field named by
  ``group_by``) arrival rate and burstiness (the squared coefficient of
  variation of inter-arrival times: 1 for Poisson, above 1 for bursts), task
  durations, decision latency, the pending queue and each node's
  outstanding tasks, and the latencies between the runtime's processes:
  the round trip of an empty call to the actor this process's scheduler
  talks to (the store or the selector, once a second) and of this
  process's syncs with the state store. (Not written as the compiler's
  ``--profile``: its ``message_s`` is a scheduler's time per task, where
  the runtime carries many tasks per call; a round trip under load would
  make it charge each task a whole call.)
* :meth:`Monitor.write_trace` -- the run as a trace file (CSV/Parquet, the
  format of :mod:`ray_adaptive.workload.trace`) that ``ray-adaptive compile
  --trace`` reads, so the compiler decides on the measured workload;
* :meth:`Monitor.export` -- the same figures as Ray metrics
  (``ray.util.metrics``), for the dashboard / Prometheus.

A task's ``duration`` here is measured from dispatch to completion as its
submitter sees it: an upper bound of its run time that includes any wait at
the node.

Long-lived tasks -- a policy's actors, whose duration is their lifetime --
are recorded while they run, not only when they end (:meth:`Monitor.started`):
:meth:`Monitor.records`, :meth:`Monitor.write_trace` and the adaptive
controller's recorded workload give each live one with its lifetime so far
as its duration (a lower bound), so a replay or a compile of the recorded
window sees the room it holds.
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections import defaultdict, deque
from dataclasses import replace
from typing import Deque, Dict, List, Mapping, Optional, Sequence, Tuple

from ray_adaptive.monitor.records import FinishedRecords
from ray_adaptive.workload.specs import TaskSpec

__all__ = ["Monitor", "percentiles"]


def _pct(values: List[float], q: float) -> float:
    return percentiles(values, (q,))[0]


def percentiles(values: List[float], qs: tuple) -> List[float]:
    """The ``q``-quantiles of ``values`` (the value at index ``q * n``), by partition, not a full sort."""
    if not values:
        return [0.0] * len(qs)
    import numpy as np

    at = [min(len(values) - 1, int(q * len(values))) for q in qs]
    part = np.partition(np.asarray(values, dtype=float), at)
    return [float(part[i]) for i in at]


def _burstiness(arrivals: List[float]) -> Optional[float]:
    """CV² of the gaps between arrivals (in floats: ``statistics.pvariance``'s exact fractions are
    slow on the router's thread)."""
    if len(arrivals) < 3:
        return None
    import numpy as np

    gaps = np.diff(np.asarray(arrivals, dtype=float))
    mean = float(gaps.mean())
    return float(gaps.var()) / (mean * mean) if mean > 0 else None


class Monitor:
    """Records a policy runtime's tasks (the last ``keep`` of them) and summarises them.

    Example::

        rt = ra.start("drf_lb")
        ...                                   # submit tasks
        print(rt.monitor.snapshot()["groups"])
        rt.monitor.write_trace("run.csv")     # then: ray-adaptive compile drf_lb --trace run.csv
    """

    def __init__(self, policy_name: str, group_by: Optional[str] = None, keep: int = 100_000):
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.policy_name = policy_name
        self.group_by = group_by
        self._done = FinishedRecords(keep)  # each with the time it finished, the task as it ran
        self._arrivals: Deque[tuple] = deque(maxlen=keep)  # (time, group)
        self._counts = {"arrivals": 0, "finished": 0, "duration_s": 0.0}  # cumulative: see load()
        self._groups: Dict[str, List[int]] = defaultdict(lambda: [0, 0, 0, 0])  # arrivals, decided, finished, dropped
        # (monotonic time, arrivals, finished per group) at each load(): rates are the difference to
        # the one recent_s ago, not a pass over the last recent_s of records on the router's thread
        self._marks: Deque[tuple] = deque([(time.monotonic(), 0, {})])
        # long tasks running now (a policy's actors): id -> (the task, dispatched at, runtime time and
        # monotonic time when told); see started()
        self._running: Dict[str, Tuple[TaskSpec, float, float, float]] = {}
        self._preempted = [0, 0.0]  # runs this process stopped for a preemption, and the seconds they had run
        self._lock = threading.Lock()
        self._metrics = None
        self._estimate: Optional[float] = None

    # -- fed by the router (cheap: a lock round per task or batch) --------------------
    def arrived(self, t: float, fields: dict) -> None:
        group = str(fields.get(self.group_by, "")) if self.group_by else ""
        with self._lock:
            self._arrivals.append((t, group))
            self._counts["arrivals"] += 1
            self._groups[group][0] += 1

    def decided(self, fields: Sequence[dict]) -> None:
        """Tasks were placed (and launched): each one's fields (one call per batch the router launches)."""
        self._count(fields, 1)

    def dropped(self, fields: dict) -> None:
        """A task was dropped at its deadline, never run."""
        self._count((fields,), 3)

    def _group_names(self, fields: Sequence[dict]) -> List[str]:
        by = self.group_by
        return [str(f.get(by, "")) for f in fields] if by else [""] * len(fields)

    def preempted(self, wasted_s: Sequence[float]) -> None:
        """Runs of this process's tasks were stopped for a preemption (issue 39), each having run
        ``wasted_s`` seconds from its dispatch (its submitter's view): counted in :meth:`load`."""
        with self._lock:
            self._preempted[0] += len(wasted_s)
            self._preempted[1] += sum(wasted_s)

    def _count(self, fields: Sequence[dict], k: int) -> None:
        groups = self._group_names(fields)
        with self._lock:
            for group in groups:
                self._groups[group][k] += 1

    def finished(self, at: float, tasks: Sequence[TaskSpec]) -> None:
        """Tasks finished at ``at`` (runtime time), each with its measured ``duration`` (one call per batch
        the router harvests): the recorded workload, as a trace describes one."""
        groups = self._group_names([t.fields for t in tasks])
        duration = sum(t.duration for t in tasks)
        with self._lock:
            if self._running:
                for t in tasks:
                    self._running.pop(t.id, None)
            self._done.extend(at, tasks)
            self._counts["finished"] += len(tasks)
            self._counts["duration_s"] += duration
            for group in groups:
                self._groups[group][2] += 1

    def started(self, at: float, tasks: Sequence[Tuple[str, float, float, dict]]) -> None:
        """Long-lived tasks -- a policy's actors -- were launched (told at ``at``, runtime time): each ``(id,
        arrival, dispatched at, fields)``. Until :meth:`finished` records them they are running: see
        :meth:`records`. (Only these: a short task is recorded when it ends.)"""
        mono = time.monotonic()
        with self._lock:
            for tid, arrival, dispatched, fields in tasks:
                self._running[tid] = (TaskSpec(tid, arrival, 0.0, fields=fields), dispatched, at, mono)

    def running(self) -> List[TaskSpec]:
        """The long tasks running now (see :meth:`started`), each with its lifetime so far as its duration."""
        return self._live(None)

    def _live(self, since: Optional[float]) -> List[TaskSpec]:
        mono = time.monotonic()
        with self._lock:
            running = list(self._running.values())
        out = []
        for spec, dispatched, at, told in running:
            now = at + (mono - told)  # (runtime time)
            duration = max(now - dispatched, 0.0)
            if since is not None and spec.arrival < since:  # running at the window's start: from there on
                out.append(replace(spec, arrival=since, duration=min(duration, max(now - since, 0.0))))
            else:
                out.append(replace(spec, duration=duration))
        return out

    # -- read ------------------------------------------------------------------
    def load(self, burst_window: int = 2000, recent_s: float = 10.0) -> dict:
        """This process's load as cumulative counters (arrivals, finished tasks and the sum of their
        durations, since the monitor began; per group: arrivals, decided, finished, dropped), at
        wall-clock ``t``, the burstiness of the last ``burst_window`` arrivals, the arrival rate and
        each group's goodput over the last ``recent_s`` (per second), and, once there are any, the runs
        this process stopped for a preemption and the seconds they had run (``preemptions``,
        ``wasted_s``): what the runtime reports to its store every second, so that a reader of two
        reports gets rates over any window, summed over processes."""
        now = time.monotonic()
        with self._lock:
            counts = dict(self._counts)
            groups = {g: {"arrivals": c[0], "decided": c[1], "finished": c[2], "dropped": c[3]}
                      for g, c in self._groups.items()}
            recent = [t for t, _ in itertools.islice(reversed(self._arrivals), burst_window)][::-1]
            marks = self._marks
            marks.append((now, counts["arrivals"], {g: c["finished"] for g, c in groups.items()}))
            while len(marks) > 2 and marks[1][0] <= now - recent_s:  # keep the newest mark recent_s old
                marks.popleft()
            since, arrived, before = marks[0]
            preempted, wasted = self._preempted
        span = max(now - since, recent_s)  # (a monitor younger than recent_s: per recent_s)
        for g, c in groups.items():
            if c["finished"] > before.get(g, 0):
                c["goodput_per_s"] = (c["finished"] - before.get(g, 0)) / span
        return {"t": time.time(), **counts, "arrival_rate_per_s": (counts["arrivals"] - arrived) / span,
                "burstiness": _burstiness(recent), "groups": groups,
                **({"preemptions": preempted, "wasted_s": wasted} if preempted else {})}

    def report(self, tally: Mapping[Tuple[str, bool], int], generation: int, latencies: List[float],
               oldest_pending: List[Tuple[str, float]]) -> dict:
        """What a process reports to its store each second: its :meth:`load`, its tasks pending and
        running per group (``tally``: (group, placed) -> tasks), the generation of the plan it follows,
        and the latency of the decisions made in it."""
        out = self.load()
        for (group, placed), k in tally.items():
            g = out["groups"].setdefault(group, {"arrivals": 0, "decided": 0, "finished": 0, "dropped": 0})
            key = "running" if placed else "pending"
            g[key] = g.get(key, 0) + k
        p50, p99 = percentiles(latencies, (0.5, 0.99)) if latencies else (None, None)
        return {**out, "generation": generation, "decision_p50_s": p50, "decision_p99_s": p99,
                "oldest_pending": oldest_pending}

    def records(self, since: Optional[float] = None, running: bool = True) -> List[TaskSpec]:
        """The finished tasks recorded (the last ``keep``), in the order they finished; then, ``running``,
        the long tasks running now (actors alive: :meth:`running`). ``since`` (runtime time): only the
        tasks that arrived then or later, and the running ones that arrived before as if they arrived at
        ``since`` -- a replay of the window from ``since`` has them hold their room from its start."""
        with self._lock:
            kept = self._done.copy(since)
        done = kept.specs()  # (outside the lock: the router's finished() does not wait for it)
        return done + self._live(since) if running else done

    def snapshot(self, router=None, window_s: Optional[float] = None) -> dict:
        """Figures of the recorded run (the last ``window_s`` seconds of arrivals, if given)."""
        with self._lock:
            if window_s is None or not self._arrivals:
                arrivals = list(self._arrivals)
                kept = self._done.copy()
            else:  # from the newest back, not a copy of up to ``keep`` records (every metrics period)
                since = self._arrivals[-1][0] - window_s  # (arrivals and finishes are appended in time order)
                arrivals = list(itertools.takewhile(lambda a: a[0] >= since, reversed(self._arrivals)))[::-1]
                kept = self._done.copy(since, finished_since=since)
        done = kept.specs()
        arrivals.sort()  # (appended in time order: linear)
        # one pass over each list, not one per group: this runs every metrics period on the
        # router's thread, over up to ``keep`` records
        times_of: Dict[str, List[float]] = defaultdict(list)
        for t, g in arrivals:
            times_of[g].append(t)
        durations_of: Dict[str, List[float]] = defaultdict(list)
        for d in done:
            g = str(d.fields.get(self.group_by, "")) if self.group_by else ""
            durations_of[g].append(d.duration)
        groups: Dict[str, dict] = {}
        span = (arrivals[-1][0] - arrivals[0][0]) if len(arrivals) > 1 else 0.0
        for g in sorted(times_of):
            times, durations = times_of[g], durations_of.get(g, [])
            groups[g] = {
                "arrivals": len(times),
                "rate_per_s": round(len(times) / span, 3) if span > 0 else 0.0,
                "burstiness": _burstiness(times),
                "finished": len(durations),
                "duration_mean_s": statistics.fmean(durations) if durations else 0.0,
                "duration_p99_s": _pct(durations, 0.99),
            }
        out = {"policy": self.policy_name, "group_by": self.group_by, "span_s": span,
               "arrivals": len(arrivals), "finished": len(done), "running_long": len(self._running),
               "rate_per_s": round(len(arrivals) / span, 3) if span > 0 else 0.0, "groups": groups}
        if router is not None:
            p50, p99 = percentiles(router.decision_latencies(), (0.5, 0.99))
            out.update({"pending": router.pending, "outstanding": router.outstanding(),
                        "decision_p50_s": p50, "decision_p99_s": p99})
            for name, values in (("message", router.message_latencies()), ("store_sync", router.store_latencies())):
                p50, p99 = percentiles(values, (0.5, 0.99)) if values else (None, None)
                out.update({f"{name}_p50_s": p50, f"{name}_p99_s": p99, f"{name}_samples": len(values)})
        return out

    def write_trace(self, path) -> int:
        """Write the finished tasks and the long ones running (:meth:`records`) as a trace (arrival, measured
        duration -- a running one's lifetime so far --, fields); returns rows."""
        from ray_adaptive.workload.trace import write_trace

        specs = sorted(self.records(), key=lambda t: (t.arrival, t.id))
        write_trace(path, specs)
        return len(specs)

    def set_estimate(self, goodput: Optional[float]) -> None:
        """The compiler's estimated goodput (tasks/s) of the plan in force at the measured load (the
        adaptive controller's); exported beside the measured one."""
        self._estimate = goodput

    @property
    def estimate(self) -> Optional[float]:
        """The goodput (tasks/s) last given to :meth:`set_estimate`, or None."""
        return self._estimate

    def export(self, router=None) -> None:
        """Set the Ray metrics ``ray_adaptive_*`` (see :mod:`ray_adaptive.monitor.metrics`)."""
        from ray_adaptive.monitor.metrics import RayMetrics

        if self._metrics is None:
            self._metrics = RayMetrics(self.policy_name)
        self._metrics.export(self, router)
