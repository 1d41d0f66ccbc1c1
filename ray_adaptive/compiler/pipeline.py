"""The compiler end to end: IR -> units -> plans -> estimates -> choice.

:func:`compile_policy` runs the four stages in order, each a pure function
of the previous one's output (plus the workload and the profile):

1. :func:`~ray_adaptive.compiler.units.analyze` -- units, State, separability;
2. :func:`~ray_adaptive.compiler.enumeration.enumerate_plans` -- the plan space;
3. :func:`~ray_adaptive.compiler.estimates.estimate_cost` and
   :func:`~ray_adaptive.compiler.estimates.estimate_quality` -- latency,
   throughput, competitive ratio;
4. :func:`~ray_adaptive.compiler.choice.choose`.

The workload is a trace (task specs: what the monitor recorded, or a file)
or, without one, the paper's three tenants (one greedy at 3x) at ``rate``
with the policy's other fields synthesised. Only the end of it is replayed
-- a window as long as the plans need to show what they hide, at least
``window`` tasks (:func:`~ray_adaptive.compiler.window.window_size`); with
``rate`` given, its arrivals are scaled to that rate.

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> c = compile_policy(load_policy("drf_lb"), rate=700, window=150, measure=False)
    >>> c.choice.estimate.plan.architecture.value
    'hybrid'
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from ray_adaptive.compiler.choice import Choice, choose, undecided
from ray_adaptive.compiler.cluster import ClusterShape, cluster_shape
from ray_adaptive.compiler.estimates import Estimate, effective_parallelism, estimate_cost, estimate_quality
from ray_adaptive.compiler.enumeration import Excluded, PlanSpace, enumerate_plans
from ray_adaptive.compiler.profile import Profile, measure_units
from ray_adaptive.compiler.analysis import Analysis, analyze
from ray_adaptive.compiler.window import WindowSize, arrival_dispersion, plan_periods, window_size
from ray_adaptive.dsl.ir import Policy, task_attributes_read
from ray_adaptive.errors import ScenarioError
from ray_adaptive.sim.events import gc_paused
from ray_adaptive.sim.model import Node, Task
from ray_adaptive.workload.specs import NodeSpec, TaskSpec
from ray_adaptive.workload.scenario import Scenario, check_fields, check_placeable
from ray_adaptive.workload.generate import paper_tenants, policy_workload

__all__ = ["Compilation", "compile_policy", "workload_window", "measured_profile"]

PLAN_FILE_VERSION = 1


@dataclass
class Compilation:
    """Everything the compiler decided, and why: printable (:meth:`format`) and a plan file (:meth:`as_dict`)."""

    analysis: Analysis
    profile: Profile
    rate: float
    window: Scenario = field(repr=False)
    capacity: float  # execution bound of the cluster, tasks/s
    limit: Optional[float]
    headroom: float
    estimates: list[Estimate]
    excluded: list[Excluded]
    choice: Choice
    settled: bool = True  # replays stopped once each plan's competitive ratio was settled
    size: Optional[WindowSize] = None  # how long the window is, and why

    @property
    def nodes(self) -> int:
        return len(self.window.nodes)

    def estimate(self, name: str) -> Estimate:
        for e in self.estimates:
            if e.plan.name == name:
                return e
        raise KeyError(f"no plan named {name!r}; plans: {', '.join(e.plan.name for e in self.estimates)}")

    def as_dict(self) -> dict:
        """The JSON plan file: units, every plan with its estimates and verdict, the choice."""
        n = self.nodes
        plans = []
        for e in self.estimates:
            v = self.choice.verdicts[e.plan.name]
            plans.append({
                **e.plan.as_dict(nodes=n),  # what the runtime needs to run any listed plan
                "latency_s": round(e.latency_s, 7), "throughput": round(e.throughput, 1),
                "competitive_ratio": _json_number(e.competitive_ratio), "ci": [_json_number(x) for x in e.interval],
                "kept": v.kept, "why": v.why,
            })
        for x in self.excluded:
            plans.append({"name": x.name, "architecture": x.architecture, "approximations": [],
                          "latency_s": None, "throughput": None, "competitive_ratio": None, "kept": False,
                          "why": f"not allowed by the IR: {x.why}"})
        chosen = self.choice.estimate
        choice = {
            **chosen.plan.as_dict(nodes=n),
            "latency_s": round(chosen.latency_s, 7), "throughput": round(chosen.throughput, 1),
            "competitive_ratio": _json_number(chosen.competitive_ratio),
            "ci": [_json_number(x) for x in chosen.interval], "why": self.choice.why,
            "steps": [s.as_dict() for s in chosen.steps],
        }
        a = self.analysis
        return {
            "version": PLAN_FILE_VERSION,
            "policy": a.policy.name,
            "limit": self.limit,
            "rate": round(self.rate, 3),
            "window": {**(self.size.as_dict() if self.size else {}), "replayed_tasks": len(self.window.tasks)},
            "cluster": {**_cluster_of(self.window.nodes), "capacity": round(self.capacity, 1)},
            "units": [u.as_dict() for u in a.units],
            "state": [v.as_dict() for v in a.state],
            "separability": a.separability.as_dict(),
            "plans": plans,
            "choice": choice,
            "profile": self.profile.as_dict(),
        }

    def format(self) -> str:
        """A human-readable report: the units, the plan table, the choice."""
        a, n = self.analysis, self.nodes
        c = _cluster_of(self.window.nodes)
        lim = f"limit {self.limit:g}" if self.limit is not None else "no limit"
        each = (f"{n} nodes x {c['executors']} executor(s), queue {c['queue']}" if isinstance(c["executors"], int)
                else f"{n} nodes with {sum(c['executors'])} executors ({'+'.join(map(str, c['executors']))}), "
                     f"queue {c['queue']}")
        out = [f"policy {a.policy.name} ({lim}) on {each}: "
               f"execution bound {self.capacity:.0f} tasks/s; rate {self.rate:.0f} tasks/s; "
               f"replayed {len(self.window.tasks)} tasks" + (" per plan at most, until its competitive ratio was settled "
                                                             "above the limit" if self.settled else "")]
        if self.size is not None:
            z = self.size
            out.append(f"window: {z.warm_s * 1e3:.0f} ms warm-up + {z.sample_s * 1e3:.0f} ms sampled ({z.why})"
                       + ("; cut short to bound the replays' cost" if z.capped else "")
                       + (f"; the trace covers only {len(self.window.tasks)} of the {z.tasks} tasks it needs"
                          if len(self.window.tasks) < z.tasks else ""))
        out += ["", "Units"]
        width = max(len(u.text) for u in a.units)
        for u in a.units:
            extra = ", ".join(str(r) for r in u.reads if r.kind != "local") or "-"
            cost = self.profile.unit_s.get(u.id)
            us = f"{cost * 1e6:6.1f} us" if cost is not None else "   model"
            out.append(f"  {u.id:<13} {u.text:<{width}}  {u.side:<5} {us}  reads {extra}")
        sep = a.separability
        parts = f": T = {sep.task_part}, N = {sep.node_part}" if sep.task_part else ""
        out.append(f"  Score: {'separable (' + sep.form + ')' + parts if sep.separable else 'not separable: ' + sep.why}")
        if sep.assumptions:
            out.append(f"         assumes {', '.join(sep.assumptions)}")
        for v in a.state:
            out.append(f"  State {v.name}: {v.merge}{' (mergeable)' if v.dynamic and v.mergeable else ''} -- {v.why}")
        out += ["", "Plans"]
        name_w = max(len(e.plan.name) for e in self.estimates)
        out.append(f"  {'plan':<{name_w}}  {'latency':>9}  {'throughput':>11}  {'CR':>6}  {'95% CI':>13}  verdict")
        for e in self.estimates:
            v = self.choice.verdicts[e.plan.name]
            chosen = e is self.choice.estimate
            label = "CHOSEN" if chosen else ("kept" if v.kept else "dropped")
            lo, hi = e.interval
            ci = f"{lo:5.3f}-{hi:<7.3f}" if math.isfinite(hi) else ("-" if math.isnan(hi) else f"{lo:5.3f}-?")
            cr = f"{e.competitive_ratio:6.3f}" if math.isfinite(e.competitive_ratio) else f"{'-':>6}"
            out.append(f"{'*' if chosen else ' '} {e.plan.name:<{name_w}}  {e.latency_s * 1e3:6.2f} ms  {e.throughput:8.0f}/s  "
                       f"{cr}  {ci:>13}  {label}: {v.why}")
        for x in self.excluded:
            out.append(f"  {x.name:<{name_w}}  {'-':>9}  {'-':>11}  {'-':>6}  not allowed: {x.why}")
        c = self.choice.estimate
        out += ["", f"Choice: {c.plan.name} ({c.plan.architecture}) -- {self.choice.why}"]
        for s in c.steps:
            out.append(f"  {s.role:<10} {s.what:<48} {s.seconds * 1e3:7.3f} ms")
        return "\n".join(out)


def _cluster_of(nodes: Sequence[NodeSpec]) -> dict:
    """The replayed cluster for a plan file: node count, executors and queue (a list, node by node, where
    the nodes differ)."""
    ex, qs = [x.executors for x in nodes], [x.queue for x in nodes]
    return {"nodes": len(nodes), "executors": ex[0] if len(set(ex)) == 1 else ex,
            "queue": qs[0] if len(set(qs)) == 1 else qs}


def _json_number(x: float):
    """A float for JSON: rounded; NaN and infinities (not JSON) as None."""
    return round(x, 4) if math.isfinite(x) else None


#: Bounds on what the compiler replays, so that no workload makes it run for hours: simulated seconds
#: in the window (periodic heartbeats and syncs cost events however few tasks arrive), and node slots
#: (a saturated start puts a task in each).
MAX_SPAN_S = 10_000.0
MAX_SLOTS = 100_000


def _nodes(policy: Policy, shape: ClusterShape, seed: int) -> tuple[NodeSpec, ...]:
    """The replayed cluster's nodes: ``shape``'s executors, queue and resources per node, with the policy's
    Node fields synthesised (the same for a uniform cluster as before nodes had sizes of their own)."""
    return _shaped(policy_workload(policy, paper_tenants(10.0), 0.01, nodes=shape.nodes, executors=1, queue=0,
                                   seed=seed).nodes, shape)


def _shaped(nodes: Sequence[NodeSpec], shape: ClusterShape) -> tuple[NodeSpec, ...]:
    """``nodes`` with ``shape``'s executors, queue and resources, node by node."""
    return tuple(dataclasses.replace(x, executors=e, queue=q, resources=dict(r) if r else {})
                 for x, e, q, r in zip(nodes, shape.executors, shape.queues, shape.resources))


def _check_cluster(shape: ClusterShape, window: int) -> None:
    if window < 10:
        raise ValueError(f"window must be at least 10 tasks, found {window}")
    if shape.nodes < 1 or min(shape.executors) < 1 or min(shape.queues) < 0:
        raise ValueError(f"need nodes >= 1, executors >= 1, queue >= 0; found {shape.nodes}, "
                         f"{min(shape.executors, default=0)}, {min(shape.queues, default=0)}")
    if shape.slots > MAX_SLOTS:
        raise ValueError(f"{shape.nodes} nodes with {shape.total_executors} executors and {sum(shape.queues)} queue "
                         f"places are {shape.slots:,} slots, over the compiler's limit of {MAX_SLOTS:,}")


def _check_span(span: float, tasks: int, how: str) -> None:
    if span > MAX_SPAN_S:
        shown = f"{span:,.0f}" if span < 1e12 else f"{span:.3g}"
        raise ValueError(f"the window of {tasks} tasks spans {shown} simulated seconds, over the "
                         f"compiler's limit of {MAX_SPAN_S:,.0f}: {how}")


def _check_trace_window(chosen: Sequence[TaskSpec], rate: Optional[float], tasks: Sequence[TaskSpec]) -> None:
    """A trace's window must take time to run, and not span too long to simulate."""
    if sum(t.duration for t in tasks) <= 0:
        raise ScenarioError("every task of the trace takes 0 s: the compiler needs durations to estimate "
                            "the cluster's execution bound (executors / mean duration)")
    span = chosen[-1].arrival - chosen[0].arrival
    if rate is not None and span > 0:
        span = (len(chosen) - 1) / rate  # (the window's arrivals are scaled to the rate)
    _check_span(span, len(chosen), "give --rate to scale its arrivals")


def workload_window(policy: Policy, tasks: Optional[Sequence[TaskSpec]], rate: Optional[float], nodes: int = 12,
                    executors: int = 1, queue: int = 2, window: int = 600, seed: int = 0,
                    node_resources: Optional[dict] = None,
                    cluster: "Optional[Sequence | ClusterShape]" = None) -> tuple[Scenario, float]:
    """The scenario the compiler replays, and the arrival rate it offers.

    The last ``window`` tasks of ``tasks`` (arrivals re-based to start at 0
    and, with ``rate``, scaled to it; durations scaled so that their mean is
    the whole trace's -- a short window of a heavy-tailed trace would
    otherwise offer a noisy load), on ``nodes`` nodes, each with
    ``node_resources`` (what the tasks' ``resources`` are fitted into; a task
    no node could take is an error). Without tasks, the paper's three
    tenants at ``rate``. ``cluster``: the nodes one by one instead
    (:mod:`ray_adaptive.compiler.cluster`: each its executors, queue, resources).
    """
    shape = cluster if isinstance(cluster, ClusterShape) else cluster_shape(nodes, executors, queue, cluster,
                                                                              node_resources)
    nodes = shape.nodes
    _check_cluster(shape, window)
    if rate is not None and not 0 < rate < math.inf:
        raise ValueError(f"rate must be a finite number of tasks/s > 0, found {rate}")
    if tasks is None:
        if rate is None:
            raise ValueError("give an arrival rate (tasks/s) or a trace to compile against")
        _check_span(window / rate, window, "raise --rate or shrink --window")  # (before making the workload)
        scenario = policy_workload(policy, paper_tenants(rate), seconds=window / rate * 1.05, nodes=nodes,
                                   executors=1, queue=0, seed=seed)
        if shape.uniform and not any(shape.resources):  # (the nodes as they always were: same fields)
            scenario = Scenario(_shaped(scenario.nodes, shape), scenario.tasks)
        else:
            scenario = Scenario(_nodes(policy, shape, seed), scenario.tasks)
        chosen = scenario.tasks[-window:]
    else:
        if not tasks:
            raise ScenarioError("the trace has no tasks")
        chosen = sorted(tasks, key=lambda t: (t.arrival, t.id))[-window:]
        scenario = Scenario(_nodes(policy, shape, seed), ())
        _check_trace_window(chosen, rate, tasks)
    t0 = chosen[0].arrival
    span = chosen[-1].arrival - t0
    offered = (len(chosen) - 1) / span if span > 0 else float("inf")
    scale = offered / rate if (rate and tasks is not None and math.isfinite(offered)) else 1.0
    # the window offers the trace's load: its durations scaled to the trace's mean (their shape kept)
    source = tasks if tasks is not None else scenario.tasks
    window_mean = sum(t.duration for t in chosen) / len(chosen)
    stretch = (sum(t.duration for t in source) / len(source)) / window_mean if window_mean > 0 else 1.0
    rebased = tuple(dataclasses.replace(t, arrival=round((t.arrival - t0) * scale, 9), duration=t.duration * stretch)
                    for t in chosen)
    out = Scenario(scenario.nodes, rebased)
    check_fields(policy, out, "trace")
    check_placeable(out, "trace", "; give the nodes resources (--node-resources '{\"CPU\": 4}')")
    return out, (rate if rate else offered)


def measured_profile(analysis: Analysis, window: Scenario, base: Optional[Profile] = None) -> Profile:
    """``base`` (default :class:`Profile`) with every unit's compute timed on the interpreter, over a
    decision's batch drawn from ``window``: up to 16 tasks Score tells apart, against every node."""
    attrs = task_attributes_read(analysis.policy.score)
    seen, heads = set(), []
    for spec in window.tasks:
        key = repr([spec.fields.get(a) for a in attrs if a not in ("id", "arrival")])
        if key not in seen:
            seen.add(key)
            heads.append(Task(spec))
        if len(heads) >= 16:
            break
    nodes = [Node(s, i) for i, s in enumerate(window.nodes)]
    return (base or Profile()).with_units(measure_units(analysis, heads, nodes))


def default_workers() -> int:
    """Processes for the replays: one per CPU, unless forking is unwise here (a pool's worker, other threads)."""
    import multiprocessing
    import os
    import threading

    if multiprocessing.parent_process() is not None or threading.active_count() > 1:
        return 1
    return os.cpu_count() or 1


def _clients(tasks: Sequence[TaskSpec]) -> int:
    """Submitting clients of a workload (a task without a submitter is its own: they go round-robin)."""
    named = {t.submitter for t in tasks if t.submitter}
    return len(named) + (1 if any(not t.submitter for t in tasks) else 0)


def _timeout(tasks: Sequence[TaskSpec]) -> float:
    """The workload's typical task timeout (the median of the finite ones; inf if none has one)."""
    finite = sorted(t.timeout for t in tasks if math.isfinite(t.timeout))
    return finite[len(finite) // 2] if finite else math.inf


def compile_policy(
    policy: Policy,
    *,
    rate: Optional[float] = None,
    trace: Optional[Sequence[TaskSpec]] = None,
    nodes: int = 12,
    executors: int = 1,
    queue: int = 2,
    node_resources: Optional[dict] = None,
    profile: Optional[Profile] = None,
    measure: bool = True,
    space: PlanSpace = PlanSpace(),
    window: int = 600,
    max_window: int = 30_000,
    headroom: float = 0.1,
    limit: Optional[float] = None,
    seed: int = 0,
    workers: Optional[int] = None,
    settle: bool = True,
    replay: str = "deciding",
    cluster: Optional[Sequence] = None,
) -> Compilation:
    """Compile ``policy`` for a workload: every plan, its estimates and verdict, and the choice.

    ``profile``: the latency model (default :class:`Profile`); ``measure``:
    time each unit on the interpreter (otherwise every unit costs
    ``profile.default_unit_s``, which makes the result machine-independent).
    ``limit`` overrides the policy's ``[limit=...]``. ``node_resources``:
    every node's resources (what a trace's tasks ask for is fitted into them). ``window`` / ``max_window``:
    the fewest and the most tasks replayed (the window's length in between is
    :func:`~ray_adaptive.compiler.window.window_size`'s). ``workers``: replay the
    plans in that many processes (the same result, sooner on several cores);
    default: one per CPU, or 1 inside a worker process or a multi-threaded
    process (the replays fork). ``settle``: stop each plan's replay once its
    competitive ratio is settled above the limit (False: replay the whole
    window, for a more precise ratio of the plans that are out; see
    :class:`~ray_adaptive.sim.metrics.Settle`). ``replay``: ``"deciding"``
    replays only the plans whose ratio can change the choice (the others are
    listed as not replayed, see :func:`~ray_adaptive.compiler.choice.undecided`);
    ``"all"`` every plan (their ratios for a report or a figure). ``cluster``: the nodes one by one, each
    with its own executors (and queue, resources), instead of ``nodes`` x ``executors``; nodes with 0
    executors are left out (see :mod:`ray_adaptive.compiler.cluster`).
    """
    if replay not in ("deciding", "all"):
        raise ValueError(f"replay must be 'deciding' or 'all', found {replay!r}")
    shape = cluster_shape(nodes, executors, queue, cluster, node_resources)
    with gc_paused():  # (a 1,000-node window is a few hundred thousand objects: collect once, at the end)
        return _compile(policy, rate, trace, shape, profile, measure, space, window,
                        max_window, headroom, limit, seed, workers, settle, replay)


def _compile(policy, rate, trace, shape: ClusterShape, profile, measure, space, window, max_window,
             headroom, limit, seed, workers, settle, replay) -> Compilation:
    if window < 10:
        raise ValueError(f"window must be at least 10 tasks, found {window}")
    if workers is None:
        workers = default_workers()
    nodes = shape.nodes
    analysis = analyze(policy)
    plans, excluded = enumerate_plans(analysis, nodes, space)
    if trace is None:  # the paper's tenants: their clients, durations and timeout
        _check_cluster(shape, window)
        if rate is not None and 0 < rate < math.inf:  # (the window asked for, before the preview's 10 tasks)
            _check_span(window / rate, window, "raise --rate or shrink --window")
        preview, _ = workload_window(policy, None, rate, window=10, seed=seed, cluster=shape)
        source: Sequence[TaskSpec] = preview.tasks
        offered = rate
    else:
        if not trace:
            raise ScenarioError("the trace has no tasks")
        source = trace
        _, offered = workload_window(policy, trace, rate, window=max(10, min(window, len(trace))), seed=seed,
                                     cluster=shape)
    # the execution bound from every task of the trace: a window's mean duration is noisy for heavy tails
    durations = np.array([t.duration for t in source])
    capacity = shape.total_executors / float(durations.mean())
    size = window_size(offered, capacity, [plan_periods(p) for p in plans], _clients(source), _timeout(source),
                       min_tasks=window, max_tasks=max(window, max_window),
                       dispersion=arrival_dispersion([t.arrival for t in source[-max(window, 2000):]]))
    scenario, offered = workload_window(policy, trace, rate, window=size.tasks, seed=seed, cluster=shape)
    profile = profile or Profile()
    if measure:
        profile = measured_profile(analysis, scenario, profile)
    shares: dict = {}
    estimates = [estimate_cost(p, analysis, profile, len(scenario.nodes),
                               effective_parallelism(p, scenario, len(scenario.nodes), shares), rate=offered)
                 for p in plans]
    limit = policy.limit if limit is None else limit
    warm = dataclasses.replace(size, warm_s=min(size.warm_s, _end_of(scenario) / 3)) if len(scenario.tasks) < size.tasks \
        else size  # a trace shorter than the window: a third of it warms up
    estimates = estimate_quality(estimates, analysis, profile, scenario, seed=seed, limit=limit, warm=warm,
                                 workers=workers, settle=settle, rate=offered, capacity=capacity,
                                 deciding=(lambda es: undecided(es, offered, limit, headroom)) if replay == "deciding"
                                 else None)
    choice = choose(estimates, offered, limit, headroom)
    return Compilation(analysis, profile, offered, scenario, capacity, limit, headroom, estimates, excluded, choice,
                       settle, size)


def _end_of(scenario: Scenario) -> float:
    return max((t.arrival for t in scenario.tasks), default=0.0)
