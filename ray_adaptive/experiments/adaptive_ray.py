"""``ray-adaptive reproduce --adaptive --ray``: the adaptive experiment on a real Ray cluster.

DRF-LB with the paper's tenants (:mod:`ray_adaptive.experiments.on_ray`'s
workload: one submitting process per tenant, tasks dropped 1 s after
arrival), once per static plan and once with ``ra.start("drf_lb",
plan="adaptive")``, on a rate that steps through phases.

By default the workload is the *scheduler-bound* one (issue 37,
``release_tests/scheduler_bound.py``): 2 ms tasks on nodes of 2 CPUs
(:data:`SCHEDULER_BOUND`), so the nodes could execute 4,000 tasks/s and the
plans' own ceilings are the knee -- on one machine, the host's CPU:
centralized ~330-390 tasks/s, decentralized ~490-590 -- and the phases
(:data:`RAY_RATES`) ramp across it and back: low, above the centralized
plan's ceiling, far above, low. ``profile`` (a host calibrated by
``release_tests/calibrate_host.py``, ``docs/compiler.md``) makes the
compiler's estimates those of this machine; without one they are the
paper's model's. The executor-bound workload of the first runs (50 ms tasks
on single-CPU nodes, ``exp=RayExperiment()``, ``phases=ADAPTIVE_PHASES`` x the
execution bound) is one argument away.

The static runs come first; with ``measure_service`` each measures how long
a task holds an executor here (:func:`~ray_adaptive.experiments.on_ray.service_time`:
the executor-bound workload, whose knee that is). On their median (else the
nominal duration) the compiler computes one estimate table for this cluster
(:func:`ray_adaptive.compiler.estimate_table`, at exactly the phases' rates):
the adaptive run starts on it (``table=``, with the table's choice for the
first phase) rather than computing its own, and it gives every run's
estimates per phase.

Per run and phase (``adaptive_ray_phases.csv``): offered rate, goodput (the
phase's arrivals that started on time, per second of the phase), drops, JFI over the tenants'
service ratios (unweighted: DRF-LB has no weights; each tenant's max-min fair share of the goodput
delivered in all, its offered rate its demand), the compiler's estimated
goodput and competitive ratio for the plan(s) in force and the goodput
estimate's error, decision latency p50/p99, the schedulers' CPU seconds per
1,000 tasks offered (``cpu_s_per_1k``; the actors' part ``cpu_actors_s_per_1k``),
the plans in force and (adaptive) the controller's verdicts.

*CPU*: the runtime's actors (store, selector, placement actors; read in each
by ``__ray_call__``) plus the submitting processes (every thread: the
policy's router and a decentralized plan's decider, but also Ray's own task
submission, alike for every plan), sampled every :data:`TICK_S`. An actor a
switch retires loses its last tick; an actor a switch starts is counted from
its start (its start-up is what the switch costs). The driver's own CPU -- the
adaptive controller's thread -- is not counted.

*Decision latency*: each decision's time in the scheduler that made it (as
``reproduce --ray``): the selector's, read from the actor by the driver, and
those the submitting processes made themselves (decentralized, or under the
selector's lease), each attributed to the tick it was read in.

The competitive ratio is the compiler's estimate only: on Ray no replay of the
ideal scheduler measures it.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from ray_adaptive._private.actors import actor_key, call_in_actor
from ray_adaptive.experiments.on_ray import (PLANS, POLICY, TASK_VEC, RayExperiment, cluster_shape, estimate_trace,
                                             phase_arrivals, service_time, tenant_drivers)
from ray_adaptive.experiments.reproduce import ADAPTIVE_PHASES
from ray_adaptive.sim.metrics import jain_index, service_ratios

__all__ = ["ADAPTIVE_PHASES", "RAY_RATES", "SCHEDULER_BOUND", "TICK_S", "controller_settings", "run_adaptive_ray",
           "reproduce_adaptive_ray", "switches_called_for"]

TICK_S = 0.5  # how often CPU, decision latencies and the plan in force are sampled
BIN_S = 1.0  # the timeline's resolution
REPORT_S = 1.0  # every process reports its load to the store this often: no evaluation more often
#: The default workload: 2 ms tasks (nodes of :data:`CPUS_PER_NODE` CPUs), the scheduler as the knee.
SCHEDULER_BOUND = RayExperiment(duration_s=0.002)
CPUS_PER_NODE = 2
#: The default phases (offered tasks/s): low, above the centralized plan's ceiling on one machine, far
#: above it, low again (``docs/benchmarks.md``, calibrate_host: centralized ~330-390, decentralized ~490-590).
RAY_RATES = (150.0, 500.0, 1000.0, 150.0)


def controller_settings(phase_s: float) -> dict:
    """The controller's settings for phases of ``phase_s``: the runtime's defaults at 20 s phases (every
    2 s over 5 s, three in a row, 10 s of dwell), scaled down with the phase as the simulator's
    ``reproduce --adaptive`` scales them -- but never evaluating faster than processes report their
    load (1 s), and two in a row on short phases, so that the switch lands within the phase."""
    if not 0 < phase_s < math.inf:
        raise ValueError(f"a phase must last a finite number of seconds > 0, found {phase_s}")
    return {"every_s": max(REPORT_S, phase_s / 10), "window_s": max(2 * REPORT_S, phase_s / 4),
            "consecutive": 3 if phase_s >= 15 else 2, "dwell_s": phase_s / 2}


def _cpu_of(_actor) -> float:
    """(Run in an actor by :func:`~ray_adaptive._private.actors.call_in_actor`.) Its process's CPU seconds so far."""
    return time.process_time()


@dataclass
class _Tick:
    t: float  # since the run's t0
    plan: str
    actor_cpu: Dict[str, float]  # actor id -> its process's CPU seconds (cumulative)
    selector_latencies: List[float]  # the selector's decisions since the last tick
    verdict: str = ""  # the controller's latest reason (adaptive)


@dataclass
class _DriverTap:
    """Samples the runtime from the driver every ``TICK_S`` (a thread): the plan in force, the actors'
    CPU, the selector's decision latencies, the controller's latest verdict."""

    rt: object
    t0: float
    ticks: List[_Tick] = field(default_factory=list)
    _seen: Dict[str, int] = field(default_factory=dict)  # selector id -> latencies read from it
    _done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self):
        self.sample()  # the baseline: what the actors used before the clock (start-up, warm-up, calibration)
        self._thread = threading.Thread(target=self._run, name="ra-adaptive-ray-tap", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(TICK_S):
            self.sample()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self.sample()

    def sample(self) -> None:
        import ray

        topo = self.rt.topology
        actors = {actor_key(a): a for a in topo.actors()}
        refs = {k: call_in_actor(a, _cpu_of) for k, a in actors.items()}
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=2.0)  # (a busy one: next tick)
        by_ref = {r: k for k, r in refs.items()}
        cpu = {}
        for r in ready:
            try:
                cpu[by_ref[r]] = ray.get(r)
            except Exception:  # retired meanwhile
                pass
        lat: List[float] = []
        if topo.selector is not None:
            key = actor_key(topo.selector)
            try:
                values = ray.get(topo.selector.decision_latencies.remote(), timeout=2.0)
                lat, self._seen[key] = values[self._seen.get(key, 0):], len(values)
            except Exception:  # retired by a switch meanwhile
                pass
        evals = self.rt.evaluations
        self.ticks.append(_Tick(time.time() - self.t0, self.rt.plan.name, cpu, lat,
                                evals[-1].reason if evals else ""))


@dataclass
class _Run:
    """What one run left: per tenant (offset, start, on time), the submitters' samples, the driver's."""

    label: str
    results: Dict[str, list]
    sub_samples: Dict[str, list]
    ticks: List[_Tick]
    history: List[dict]
    service_s: float
    arrived: int


def _run(plan: str, arrivals: Dict[str, List[float]], exp: RayExperiment, nodes: int, executors: int,
         adaptive: Optional[dict] = None, echo: Callable[[str], None] = print, measure_service: bool = True,
         profile=None) -> _Run:
    """One run on the connected cluster: ``plan`` (or adaptive, with ``adaptive``: start()'s controller
    keyword arguments, and ``profile`` for its later estimate tables), the arrivals submitted from one
    process per tenant."""
    import ray

    import ray_adaptive as ra

    kwargs = {"plan": "adaptive", **adaptive, "profile": profile} if adaptive is not None else {"plan": plan}
    rt = ra.start(POLICY, queue=exp.queue, metrics_every_s=None, **kwargs)
    try:
        if adaptive is not None:  # its estimate table first: a compile beside the load would skew phase 1
            deadline = time.monotonic() + 300
            while rt.control_loop.controller is None and rt.control_loop.failed is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if rt.control_loop.controller is None:
                raise RuntimeError(f"the adaptive controller did not start: {rt.control_loop.failed!r}")
        with tenant_drivers(list(arrivals), nodes) as subs:
            service_s = service_time(subs, executors, exp) if measure_service else exp.duration_s
            if adaptive is not None:  # the calibration's bursts leave the controller's window first
                time.sleep(adaptive["window_s"])
            t0 = time.time() + 0.5
            tap = _DriverTap(rt, t0)
            try:
                outs = ray.get([subs[t].run.remote(t, arrivals[t], t0, exp, TASK_VEC, TICK_S) for t in arrivals])
            finally:
                tap.stop()
        # a switch's pause is what the submitting processes' callers saw (the driver submits nothing)
        pauses = [o[4] for o in outs]
        history = [{k: e.get(k) for k in ("time", "from", "to", "reason", "freeze_s")} | {"t": e["time"] - t0}
                   | {"pause_s": max((p[e["generation"]] for p in pauses if e["generation"] in p), default=None)}
                   for e in rt.history]
    finally:
        ra.shutdown()
    label = "adaptive" if adaptive is not None else tap.ticks[0].plan
    return _Run(label, {t: o[0] for t, o in zip(arrivals, outs)}, {t: o[3] for t, o in zip(arrivals, outs)},
                tap.ticks, history, service_s, sum(len(a) for a in arrivals.values()))


# ----------------------------------------------------------------- figures of a run

def _share(t: float, lo: float, hi: float) -> bool:
    return lo <= t < hi


def _window(run: _Run, arrivals: Dict[str, List[float]], lo: float, hi: float, capacity: float) -> dict:
    """Offered, goodput, drops and JFI of the tasks that arrived in [lo, hi) (a task that arrived late
    in a phase and started in the next one counts for the phase that offered it: a backlog carried
    over does not inflate the next phase's goodput beyond what it offered)."""
    span = hi - lo
    offered = {t: sum(_share(x, lo, hi) for x in arrivals[t]) / span for t in arrivals}
    goodput = {t: sum(ok and _share(off, lo, hi) for off, _, ok in run.results[t]) / span for t in arrivals}
    drops = sum(not ok and _share(off, lo, hi) for res in run.results.values() for off, _, ok in res)
    # fair shares of what was delivered: above a plan's own ceiling the nominal bound is no one's share
    delivered = min(capacity, sum(goodput.values()))
    jfi = jain_index(list(service_ratios(goodput, offered, delivered).values())) if delivered > 0 else 0.0
    return {"offered": sum(offered.values()), "goodput": sum(goodput.values()), "drops": drops, "jfi": jfi,
            "goodput_by_tenant": goodput}


def _ticks_in(run: _Run, lo: float, hi: float) -> List[_Tick]:
    """The driver's ticks that cover [lo, hi) (each covers the TICK_S before it)."""
    return [k for k in run.ticks[1:] if _share(k.t - TICK_S / 2, lo, hi)]


def _plans_in(run: _Run, lo: float, hi: float) -> List[str]:
    """The plans in force over [lo, hi), one entry per tick (so: time-weighted)."""
    ticks = _ticks_in(run, lo, hi)
    if not ticks:  # (a window shorter than a tick: the plan in force at its start)
        before = [k for k in run.ticks if k.t <= lo] or run.ticks[:1]
        return [before[-1].plan]
    return [k.plan for k in ticks]


def _cpu_in(run: _Run, lo: float, hi: float) -> tuple:
    """CPU seconds the runtime's actors and the submitting processes used in [lo, hi) (tick increments)."""
    actors, last = 0.0, dict(run.ticks[0].actor_cpu)
    for k in run.ticks[1:]:
        for a, c in k.actor_cpu.items():
            if _share(k.t - TICK_S / 2, lo, hi):
                actors += c - last.get(a, 0.0)
            last[a] = c
    callers = 0.0
    for samples in run.sub_samples.values():
        for (t, c, _), (_, prev, _) in zip(samples[1:], samples):
            if _share(t - TICK_S / 2, lo, hi):
                callers += c - prev
    return actors, callers


def _latencies_in(run: _Run, lo: float, hi: float) -> List[float]:
    out = [x for k in _ticks_in(run, lo, hi) for x in k.selector_latencies]
    for samples in run.sub_samples.values():
        out += [x for t, _, lat in samples if _share(t - TICK_S / 2, lo, hi) for x in lat]
    return out


def _estimates(table, rate: float, plans: Sequence[str]) -> dict:
    """The table's goodput and ratio at ``rate``, averaged over the plans in force (one entry per tick)."""
    row, choice = table.at(rate)
    known = [p for p in plans if p in row]
    if not known:
        return {"est_goodput": math.nan, "est_cr": math.nan, "choice": choice}
    return {"est_goodput": statistics.fmean(row[p].goodput(rate, table.capacity) for p in known),
            "est_cr": statistics.fmean(row[p].ratio for p in known), "choice": choice}


def phase_rows(run: _Run, arrivals: Dict[str, List[float]], rates: Sequence[float], phase_s: float,
               capacity: float, table) -> List[dict]:
    """Per phase of ``run``: the figures the module doc lists."""
    from ray_adaptive.monitor import percentiles

    rows = []
    for i, rate in enumerate(rates):
        lo, hi = i * phase_s, (i + 1) * phase_s
        w = _window(run, arrivals, lo, hi, capacity)
        plans = _plans_in(run, lo, hi)
        est = _estimates(table, rate, plans)
        tasks = sum(_share(x, lo, hi) for a in arrivals.values() for x in a)
        p50, p99 = percentiles(_latencies_in(run, lo, hi), (0.5, 0.99))
        verdicts = [k.verdict for k in _ticks_in(run, lo, hi) if k.verdict]
        cpu = _cpu_in(run, lo, hi)
        rows.append({
            "run": run.label, "phase": i + 1, "rate": round(rate, 1), "offered": round(w["offered"], 1),
            "goodput": round(w["goodput"], 1), "drops": w["drops"], "jfi": round(w["jfi"], 4),
            "est_goodput": round(est["est_goodput"], 1), "est_cr": round(est["est_cr"], 3),
            "est_error": round((est["est_goodput"] - w["goodput"]) / w["goodput"], 3) if w["goodput"] else math.nan,
            "decision_p50_ms": round(p50 * 1e3, 3), "decision_p99_ms": round(p99 * 1e3, 3),
            "cpu_s_per_1k": round(1e3 * sum(cpu) / tasks, 2) if tasks else math.nan,
            "cpu_actors_s_per_1k": round(1e3 * cpu[0] / tasks, 2) if tasks else math.nan,
            "in_force": ", ".join(dict.fromkeys(plans)), "compiler_choice": est["choice"],
            "switches": sum(_share(h["t"], lo, hi) for h in run.history),
            "controller": " | ".join(dict.fromkeys(verdicts)),
            **{f"goodput_{t}": round(g, 1) for t, g in sorted(w["goodput_by_tenant"].items())},
        })
    return rows


def timeline_rows(run: _Run, arrivals: Dict[str, List[float]], seconds: float, capacity: float,
                  table) -> List[dict]:
    """Per ``BIN_S`` of ``run``: offered, goodput, JFI, the estimated ratio of the plan in force, the plan
    in force (the format of :func:`ray_adaptive.experiments.simulate.plot_timeline`)."""
    out, lo = [], 0.0
    while lo < seconds - 1e-9:
        hi = min(seconds, lo + BIN_S)
        w = _window(run, arrivals, lo, hi, capacity)
        plans = _plans_in(run, lo, hi)
        out.append({"plan": run.label, "start": round(lo, 3), "offered": round(w["offered"], 1),
                    "goodput": round(w["goodput"], 1), "jfi": round(w["jfi"], 4),
                    "cr": round(_estimates(table, max(w["offered"], 1e-9), plans)["est_cr"], 3),
                    "in_force": plans[-1]})
        lo = hi
    return out


# ----------------------------------------------------------------- the experiment

def switches_called_for(table, settings: dict, rates: Sequence[float]) -> list:
    """The switches the controller makes on the estimates alone, the offered rate measured exactly:
    ``(phase, to, reason)`` for each phase that leaves the plan in force (from the first phase's choice).
    A different choice is not enough: one better by less than the controller's margin is no reason."""
    from ray_adaptive.control import Controller, Measurement, Settings

    s = Settings(**{k: v for k, v in settings.items() if k in Settings.__dataclass_fields__})
    controller, out, t = Controller(table, s, table.at(rates[0])[1]), [], 0.0
    for phase, rate in enumerate(rates, start=1):
        t += s.dwell_s  # (each phase long enough to dwell and to agree ``consecutive`` times)
        for _ in range(s.consecutive):
            t += s.every_s
            v = controller.evaluate(Measurement(time=t, rate=rate))
            if v.switch_to is not None:
                controller.switched(v.switch_to.name, t)
                out.append((phase, v.switch_to.name, v.reason))
                break
    return out


def run_adaptive_ray(phase_s: float, exp: RayExperiment = SCHEDULER_BOUND, plans: Sequence[str] = PLANS,
                     phases: Optional[Sequence[float]] = None, adaptive: bool = True,
                     settings: Optional[dict] = None, echo: Callable[[str], None] = print,
                     rates: Optional[Sequence[float]] = None, measure_service: Optional[bool] = None,
                     profile=None) -> dict:
    """Every static plan of ``plans``, then (``adaptive``) the adaptive runtime, on the connected cluster,
    each on the same arrivals over ``rates`` (tasks/s; default :data:`RAY_RATES`) or ``phases`` x the
    nominal execution bound, ``phase_s`` each. ``measure_service`` (default: with ``phases``) measures
    the service time the estimates assume; ``profile``: the compiler's latency model (a calibrated host:
    :mod:`ray_adaptive.compiler.calibration`). Returns ``phases`` (rows), ``timeline`` (rows),
    ``switches`` (the adaptive run's history), ``table`` (the compiler's estimate table), ``lost`` (tasks
    submitted without a result: 0), ``service_s``."""
    from ray_adaptive.compiler import estimate_table
    from ray_adaptive.dsl import load_policy

    if not plans and not adaptive:
        raise ValueError("nothing to run: no static plan and adaptive=False")
    if phases is not None and rates is not None:
        raise ValueError("give the phases' rates (rates=, tasks/s) or their multiples of the execution bound "
                         "(phases=), not both")
    if phases is not None and (not phases or any(not (f > 0 and math.isfinite(f)) for f in phases)):
        raise ValueError(f"phases must be positive multiples of the execution bound, got {list(phases)!r}")
    if phases is None:
        rates = RAY_RATES if rates is None else rates
        if not rates or any(not (r > 0 and math.isfinite(r)) for r in rates):
            raise ValueError(f"rates must be positive tasks/s, got {list(rates)!r}")
    measure_service = phases is not None if measure_service is None else measure_service
    settings = dict(settings or controller_settings(phase_s))
    nodes, executors, per_node = cluster_shape()
    capacity = exp.capacity(executors)
    rates = [f * capacity for f in phases] if phases is not None else [float(r) for r in rates]
    arrivals = phase_arrivals(rates, phase_s, exp.seed)
    seconds = phase_s * len(rates)
    echo(f"{nodes} nodes, {executors} executors, tasks of {exp.duration_s * 1e3:.0f} ms: execution bound "
         f"{capacity:.0f} tasks/s; phases of {phase_s:g} s at {', '.join(f'{r:.0f}' for r in rates)} tasks/s")
    runs = []
    for plan in plans:
        runs.append(_run(plan, arrivals, exp, nodes, executors, echo=echo, measure_service=measure_service))
        if measure_service:
            echo(f"  {runs[-1].label}: service time {runs[-1].service_s * 1e3:.1f} ms")
    service_s = statistics.median(r.service_s for r in runs) if runs else exp.duration_s
    # the compiler's estimates at exactly these rates, for tasks of the measured service time
    trace = estimate_trace(capacity, nodes, exp, per_node, service_s)
    fractions = tuple(sorted({r * service_s / executors for r in rates}))  # (x the table's execution bound)
    t = time.perf_counter()
    table = estimate_table(load_policy(POLICY), nodes=nodes, executors=per_node, queue=exp.queue, trace=trace,
                           fractions=fractions, workers=1, profile=profile)
    choices = [table.at(r)[1] for r in rates]
    echo(f"the compiler's estimates ({time.perf_counter() - t:.1f} s, tasks of {service_s * 1e3:.1f} ms, bound "
         f"{table.capacity:.0f} tasks/s) choose per phase: "
         + "; ".join(f"{r:.0f}/s {c}" for r, c in zip(rates, choices)))
    called_for = switches_called_for(table, settings, rates)
    boundary = bool(called_for)
    for phase, to, why in called_for:
        echo(f"  phase {phase}: the controller would switch to {to} ({why})")
    if not boundary:
        echo("  no phase boundary: at no phase's rate do the estimates give the controller a reason to leave "
             "the first phase's plan (" + ("the same plan is best within the limit at every rate" if len(set(choices)) == 1
                                           else "the other choices are not better by its margin") + ")")
    if adaptive:
        runs.append(_run("adaptive", arrivals, exp, nodes, executors, echo=echo, measure_service=measure_service,
                         adaptive={**settings, "table": table, "initial": choices[0]}, profile=profile))
        echo(f"  adaptive: {len(runs[-1].history)} switch(es)")
    rows = [row for r in runs for row in phase_rows(r, arrivals, rates, phase_s, capacity, table)]
    timeline = [row for r in runs for row in timeline_rows(r, arrivals, seconds, capacity, table)]
    lost = sum(r.arrived - sum(len(x) for x in r.results.values()) for r in runs)
    switches = next((r.history for r in runs if r.label == "adaptive"), [])
    return {"phases": rows, "timeline": timeline, "switches": switches, "table": table, "lost": lost,
            "service_s": service_s, "boundary": boundary, "choices": choices, "rates": rates,
            "settings": settings}


def format_phases(rows: Sequence[dict]) -> str:
    """The per-phase table as text."""
    head = ("run", "phase", "rate", "goodput", "est (err)", "JFI", "est CR", "dec p50/p99 ms",
            "CPU s/1k (actors)", "plan(s) in force")
    lines = [(r["run"], r["phase"], f"{r['rate']:.0f}", f"{r['goodput']:.1f}",
              f"{r['est_goodput']:.1f} ({r['est_error']:+.0%})" if not math.isnan(r["est_error"]) else "-",
              f"{r['jfi']:.3f}", f"{r['est_cr']:.3f}", f"{r['decision_p50_ms']:.2f}/{r['decision_p99_ms']:.2f}",
              f"{r['cpu_s_per_1k']:.1f} ({r['cpu_actors_s_per_1k']:.1f})", r["in_force"]) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(x) for x in lines])


def reproduce_adaptive_ray(out_dir: "str | Path" = "out/reproduce_adaptive_ray", quick: bool = False,
                           phase_s: Optional[float] = None, nodes: int = 4, seed: int = 0,
                           plans: Sequence[str] = PLANS, echo: Callable[[str], None] = print,
                           profile=None) -> dict:
    """``ray-adaptive reproduce --adaptive --ray``: a local cluster of ``nodes`` nodes of
    :data:`CPUS_PER_NODE` CPUs (unless Ray is already connected), :func:`run_adaptive_ray` on the
    scheduler-bound workload (the static ``plans``, then the adaptive runtime; ``profile``: the
    compiler's latency model); writes ``adaptive_ray_phases.csv``, ``timeline.csv`` and ``timeline.png``
    to ``out_dir``."""
    import pandas as pd
    import ray

    from ray_adaptive.experiments.simulate import plot_timeline
    from ray_adaptive.local_multinode import local_cluster

    phase_s = phase_s or (6.0 if quick else 20.0)
    settings = controller_settings(phase_s)  # (a bad phase fails before a cluster starts)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    exp = dataclasses.replace(SCHEDULER_BOUND, seed=seed)
    if ray.is_initialized():
        res = run_adaptive_ray(phase_s, exp, plans, settings=settings, echo=echo, profile=profile)
    else:
        echo(f"starting a local Ray cluster of {nodes} nodes x {CPUS_PER_NODE} CPUs ...")
        with local_cluster(num_nodes=nodes, num_cpus=CPUS_PER_NODE):
            res = run_adaptive_ray(phase_s, exp, plans, settings=settings, echo=echo, profile=profile)
    pd.DataFrame(res["phases"]).to_csv(out / "adaptive_ray_phases.csv", index=False)
    pd.DataFrame(res["timeline"]).to_csv(out / "timeline.csv", index=False)
    fig = plot_timeline(res["timeline"], out, title="drf_lb on Ray: adaptive vs static plans",
                        cr_label="competitive ratio (estimated)")
    echo("\n" + format_phases(res["phases"]))
    for s in res["switches"]:
        pause = (f"; freeze {s['freeze_s'] * 1e3:.0f} ms" if s["freeze_s"] is not None else "") + (
            f", pause {s['pause_s'] * 1e3:.0f} ms (the longest a submitting process saw)" if s["pause_s"] is not None
            else "")
        echo(f"switch at {s['t']:.1f} s: {s['from']} -> {s['to']} ({s['reason']}{pause})")
    if not res["switches"]:
        echo("the adaptive run did not switch; the controller's verdicts per phase are in the CSV's 'controller'")
    echo(f"tasks without a result: {res['lost']}; {time.perf_counter() - start:.0f} s in all")
    echo(f"wrote {out / 'adaptive_ray_phases.csv'}, {out / 'timeline.csv'} and {fig.name}")
    return {**res, "figure": fig, "csv": out / "adaptive_ray_phases.csv"}
