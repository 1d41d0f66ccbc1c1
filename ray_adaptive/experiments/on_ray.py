"""The paper's experiment on real Ray: DRF-LB through the runtime, per plan and arrival rate.

Three tenants, "greedy" at 3x the rate of each other one, Poisson arrivals.
Each tenant submits from its own process (a submitter actor), as tenants'
drivers do; every task sleeps ``duration_s`` on one of the nodes'
single executors and is dropped when it is not placed within ``timeout_s``
of its arrival (the runtime's ``deadline_s``: it never launches, as the
compiler's cluster model drops it) or, placed in time, starts later than
that (it returns without running). Per plan and rate:
goodput (tasks finished on time per second), drops, each tenant's goodput,
Jain's index over service ratios (goodput / max-min fair share), decision
latency, and the compiler's estimates for the same plan, its cluster model
serving tasks of the service time measured on this cluster before the run
(the duration plus Ray's and the runtime's per-task overhead).

Example::

    with local_cluster(num_nodes=6, num_cpus=1):
        rows = run_sweep(RayExperiment(), rates=[60, 120], plans=["centralized", "hybrid"])
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

import numpy as np

from ray_adaptive._private.actors import wait_ready
from ray_adaptive.runtime.selector_client import SelectorClient
from ray_adaptive.sim.metrics import jain_index, service_ratios
from ray_adaptive.workload.generate import paper_tenants

__all__ = ["RayExperiment", "run_plan", "run_sweep", "PLANS", "cluster_shape", "phase_arrivals", "tenant_drivers",
           "service_time", "estimate_trace", "TASK_VEC"]

PLANS = ("centralized", "decentralized", "hybrid")
POLICY = "drf_lb"
TASK_VEC = [0.1, 0.2, 0.1]  # every task's resource_vec (DRF's dominant share)


@dataclass(frozen=True)
class RayExperiment:
    """The workload and cluster model of one real-Ray run."""

    duration_s: float = 0.05  # task length: one executor serves 20 tasks/s
    timeout_s: float = 1.0
    seconds: float = 4.0  # arrivals per run
    queue: int = 2
    seed: int = 0

    def capacity(self, executors: int) -> float:
        """Execution bound (tasks/s) of ``executors`` executors (one per CPU)."""
        return executors / self.duration_s


def _job_fn():
    import ray

    @ray.remote(num_cpus=1)
    def job(deadline: float, duration: float):
        start = time.time()
        if start > deadline:  # too late: dropped, as the cluster model's timeout drops it
            return start, False
        time.sleep(duration)
        return start, True

    return job


def _submitter_cls():
    import ray

    @ray.remote(num_cpus=0)
    class Submitter:
        """One tenant's driver: submits its tasks at their arrival times."""

        def warm(self, tenant: str, n: int, vec: list) -> None:
            """Start workers and leases before the clock runs: a cold start would drop the first second."""
            import ray_adaptive as ra

            fn = ra.policy(POLICY)(_job_fn()).options(task={"tenant": tenant, "resource_vec": vec})
            ray.get([fn.remote(time.time() + 3600, 0.0) for _ in range(n)])

        def calibrate(self, tenant: str, n: int, vec: list, t0: float, duration: float) -> list:
            """From ``t0``, ``n`` tasks of ``duration`` at once, through the runtime: when each started."""
            import ray_adaptive as ra

            fn = ra.policy(POLICY)(_job_fn()).options(task={"tenant": tenant, "resource_vec": vec})
            time.sleep(max(0.0, t0 - time.time()))
            futures = [fn.submit(time.time() + 3600, duration) for _ in range(n)]
            return [start for start, _ in ray.get([f.result() for f in futures])]

        def run(self, tenant: str, offsets: List[float], t0: float, exp: RayExperiment, vec: list,
                tick_s: Optional[float] = None) -> tuple:
            """Submit at ``t0 + offsets``; each task's (offset, start - t0, ran on time), this process's
            decision latency p50/p99, with ``tick_s`` this process's samples every ``tick_s``:
            (time - t0, CPU seconds of the process, the decisions made here since the last sample), and
            the pause its callers saw at each live switch (generation -> seconds)."""
            import threading

            import ray_adaptive as ra

            # a task not placed by its timeout is dropped by the runtime, as the cluster model drops
            # it; one placed in time but started late returns without running (the job checks)
            fn = ra.policy(POLICY)(_job_fn()).options(task={"tenant": tenant, "resource_vec": vec},
                                                      deadline_s=exp.timeout_s)
            done, samples = threading.Event(), []
            sampler = None
            if tick_s is not None:
                tap = _LatencyTap(ra.runtime_of(POLICY))
                sampler = threading.Thread(target=_sample, args=(tap, t0, tick_s, done, samples), daemon=True)
                sampler.start()
            futures = []
            for off in offsets:
                delay = t0 + off - time.time()
                if delay > 0:
                    time.sleep(delay)
                futures.append((off, fn.submit(t0 + off + exp.timeout_s, exp.duration_s)))
            out = []
            for off, f in futures:
                try:
                    start, ok = ray.get(f.result())
                except ra.PlacementDeadlineExceeded:
                    start, ok = float("inf"), False
                out.append((off, start - t0, ok))
            done.set()
            if sampler is not None:
                sampler.join()
            rt = ra.runtime_of(POLICY)
            stats = rt.stats()  # this process's decisions (decentralized: made here)
            return out, stats["decision_p50_s"], stats["decision_p99_s"], samples, rt.pauses()

    return Submitter


class _LatencyTap:
    """The latencies of the decisions this process made since the last call (a switch replaces the
    decider: its list starts anew). A selector's decisions are the selector's (the driver reads them
    from the actor, once for every process); here only those made under its lease."""

    def __init__(self, rt):
        self.rt, self._decider, self._seen = rt, None, 0

    def new(self) -> List[float]:
        d = self.rt.router.decider
        if d is not self._decider:
            self._decider, self._seen = d, 0
        # (a selector's client: only this process's decisions under a lease -- the selector's own are
        # sampled from the actor; a local decider: all of this process's)
        values = d.leased_decision_latencies() if isinstance(d, SelectorClient) else self.rt.router.decision_latencies()
        fresh, self._seen = values[self._seen:], len(values)
        return fresh


def _sample(tap: _LatencyTap, t0: float, tick_s: float, done, samples: list) -> None:
    """Every ``tick_s`` until ``done`` (and once more then): (time - t0, process CPU s, new latencies)."""
    while True:
        stop = done.wait(tick_s)
        samples.append((time.time() - t0, time.process_time(), tap.new()))
        if stop:
            return


def phase_arrivals(rates: Sequence[float], phase_s: float, seed: int = 0) -> dict:
    """Each paper tenant's Poisson arrival offsets (s) over phases of ``phase_s`` at total ``rates``
    (the greedy tenant at 3x each other one throughout)."""
    rng = np.random.default_rng(seed)
    per_phase = [paper_tenants(r) for r in rates]
    names = [t.name for t in per_phase[0]]
    def drawn(k: int, i: int) -> list:  # (poisson, then uniform: one phase draws as _arrivals always did)
        return rng.uniform(i * phase_s, (i + 1) * phase_s, rng.poisson(per_phase[i][k].rate * phase_s)).tolist()

    return {name: sorted(x for i in range(len(rates)) for x in drawn(k, i)) for k, name in enumerate(names)}


def _arrivals(rate: float, exp: RayExperiment) -> dict:
    return phase_arrivals([rate], exp.seconds, exp.seed)


def cluster_shape() -> tuple:
    """(nodes, executors, executors per node) of the connected cluster: one executor per CPU."""
    import ray

    alive = [n for n in ray.nodes() if n["Alive"]]
    return (len(alive), sum(int(n["Resources"].get("CPU", 1)) for n in alive),
            int(alive[0]["Resources"].get("CPU", 1)))


@contextmanager
def tenant_drivers(tenants: Sequence[str], nodes: int, vec: list = TASK_VEC):
    """One submitting process per tenant (a :class:`Submitter` actor), up and warmed up (workers and
    leases started: a cold start would drop the first second); killed on exit."""
    import ray

    Submitter = _submitter_cls()
    subs = {t: Submitter.remote() for t in tenants}
    try:
        wait_ready(subs.values())
        ray.get([s.warm.remote(t, 2 * nodes, vec) for t, s in subs.items()])
        yield subs
    finally:
        for s in subs.values():
            ray.kill(s)


def service_time(subs: dict, executors: int, exp: RayExperiment, vec: list = TASK_VEC, bursts: int = 3) -> float:
    """The time one task holds an executor on this cluster under this plan: its duration plus
    what Ray and the runtime add (launch, lease, result, the decision that frees the slot).
    Every tenant's process submits a burst at once (the experiment's owners, so the same
    worker-lease behaviour), 12 tasks per executor in all: each owner keeps a backlog per node,
    as under overload (fewer, and owners return their worker leases between tasks). The
    executors' start rate between the
    first wave (workers and leases starting) and the last one (executors running dry) gives the
    time per task; the median over ``bursts`` bursts (one burst can be far off on a loaded
    machine)."""
    import ray

    n = max(2, 12 * executors // len(subs))
    figures = []
    for _ in range(bursts):
        t0 = time.time() + 0.2
        starts = [x for xs in ray.get([s.calibrate.remote(t, n, vec, t0, exp.duration_s)
                                       for t, s in subs.items()]) for x in xs]
        figure = _steady_service(starts, executors)
        if figure is not None:
            figures.append(figure)
    return max(exp.duration_s, float(np.median(figures))) if figures else exp.duration_s


def _steady_service(starts: Sequence[float], executors: int) -> Optional[float]:
    """Seconds per task per executor from a burst's start times: the start rate from the first wave's
    last start to the last wave's first (None if the burst is too short to have that middle)."""
    starts = sorted(starts)
    steady = starts[executors - 1:len(starts) - executors + 1]
    if len(steady) < 2:
        return None
    return executors * (steady[-1] - steady[0]) / (len(steady) - 1)


def run_plan(plan: str, rate: float, exp: RayExperiment = RayExperiment()) -> dict:
    """One run of ``plan`` at ``rate`` tasks/s on the connected cluster; a row of figures."""
    import ray

    import ray_adaptive as ra

    nodes, executors, _ = cluster_shape()
    capacity = executors / exp.duration_s
    arrivals = _arrivals(rate, exp)
    rt = ra.start(POLICY, plan=plan, queue=exp.queue, metrics_every_s=None)
    try:
        with tenant_drivers(list(arrivals), nodes) as subs:
            service_s = service_time(subs, executors, exp)
            t0 = time.time() + 0.5
            results = ray.get([subs[t].run.remote(t, arrivals[t], t0, exp, TASK_VEC) for t in arrivals])
        stats = rt.stats()
        name, arch = rt.plan.name, rt.plan.architecture
    finally:
        ra.shutdown()
    # on time = started by its deadline, counted while arrivals run (what the nodes carry in that time)
    on_time = {t: sum(ok and start <= exp.seconds for _, start, ok in res) for t, (res, *_) in zip(arrivals, results)}
    if arch == "decentralized":  # the decisions were made in the submitting processes
        stats = {"decision_p50_s": max(r[1] for r in results), "decision_p99_s": max(r[2] for r in results)}
    offered = {t: len(arrivals[t]) / exp.seconds for t in arrivals}
    goodput = {t: on_time[t] / exp.seconds for t in arrivals}
    ratios = service_ratios(goodput, offered, capacity)
    row = {
        "plan": name, "architecture": arch, "rate": rate, "nodes": nodes, "capacity": capacity,
        "service_ms": round(service_s * 1e3, 2),
        "offered": round(sum(offered.values()), 2), "goodput": round(sum(goodput.values()), 2),
        "drops": sum(not ok for res, *_ in results for _, _, ok in res),
        # of the drops, those never launched -- not placed, or not launched, by the deadline (the rest started after it)
        "unplaced": sum(start == float("inf") for res, *_ in results for _, start, _ in res),
        "jfi": round(jain_index(list(ratios.values())), 4),
        "decision_p50_ms": round(stats["decision_p50_s"] * 1e3, 3),
        "decision_p99_ms": round(stats["decision_p99_s"] * 1e3, 3),
    }
    row.update({f"goodput_{t}": round(goodput[t], 2) for t in sorted(goodput)})
    return row


def estimate(plan_name: str, rate: float, nodes: int, exp: RayExperiment, per_node: int = 1,
             service_s: Optional[float] = None) -> dict:
    """The compiler's estimates for the plan the runtime ran, at this rate and cluster.

    ``service_s``: how long a task holds an executor on this cluster (``run_plan`` measures it
    before the run: the task's duration plus Ray's and the runtime's per-task overhead); the
    cluster model then serves tasks of that length, so the estimate is calibrated to this
    cluster. None: the nominal duration."""
    from ray_adaptive.compiler import compile_policy
    from ray_adaptive.dsl import load_policy

    trace = estimate_trace(rate, nodes, exp, per_node, service_s)
    c = compile_policy(load_policy(POLICY), trace=trace, nodes=nodes, executors=per_node, queue=exp.queue, workers=1,
                       replay="all")  # (this plan's ratio, whether or not it decides the choice)
    try:
        e = c.estimate(plan_name)
    except KeyError:
        return {}
    # the scheduler-bound goodput: what arrives, up to the plan's throughput and the execution bound
    return {"est_throughput": round(e.throughput, 1), "est_competitive_ratio": round(e.competitive_ratio, 4),
            "est_goodput": round(min(rate, e.throughput, nodes * per_node / (service_s or exp.duration_s)), 2),
            "compiler_choice": c.choice.estimate.plan.name}


def estimate_trace(rate: float, nodes: int, exp: RayExperiment, per_node: int = 1,
                   service_s: Optional[float] = None) -> list:
    """The run's workload as the compiler sees it: these tenants at ``rate``, one submitter each, tasks
    of ``service_s`` (None: the nominal duration), this timeout; 4 s of task specs."""
    import dataclasses

    from ray_adaptive.workload.generate import tenant_workload

    service = service_s or exp.duration_s
    tenants = [dataclasses.replace(t, duration=service, clients=1) for t in paper_tenants(rate)]
    return tenant_workload(tenants, 4.0, nodes=nodes, executors=per_node, queue=exp.queue, timeout=exp.timeout_s,
                           seed=exp.seed).tasks


def run_sweep(exp: RayExperiment, rates: Sequence[float], plans: Sequence[str] = PLANS, with_estimates: bool = True,
              progress: Optional[Callable[[dict], None]] = None) -> List[dict]:
    """Every plan at every rate on the connected cluster."""
    nodes, _, per_node = cluster_shape()
    rows = []
    for rate in rates:
        for plan in plans:
            row = run_plan(plan, rate, exp)
            if with_estimates:
                row.update(estimate(row["plan"], rate, nodes, exp, per_node, service_s=row["service_ms"] / 1e3))
            rows.append(row)
            if progress is not None:
                progress(row)
    return rows


def format_rows(rows: Sequence[dict]) -> str:
    """A table: per plan and rate, goodput, drops, per-tenant goodput, fairness, estimates."""
    tenants = sorted(k[len("goodput_"):] for k in rows[0] if k.startswith("goodput_")) if rows else []
    head = (f"{'rate':>6} {'plan':<27} {'goodput':>8} {'drops':>6} " + " ".join(f"{t:>7}" for t in tenants)
            + f" {'JFI':>6} {'dec p50':>8} {'est gp':>7}")
    out = [head]
    for r in rows:
        est = r.get("est_goodput")
        out.append(f"{r['rate']:>6.0f} {r['plan']:<27} {r['goodput']:>8.1f} {r['drops']:>6d} "
                   + " ".join(f"{r['goodput_' + t]:>7.1f}" for t in tenants)
                   + f" {r['jfi']:>6.3f} {r['decision_p50_ms']:>6.2f}ms {'' if est is None else f'{est:7.1f}'}")
    return "\n".join(out)


def plot_rows(rows: Sequence[dict], out_dir) -> list:
    """goodput vs rate, JFI vs rate (per architecture), estimated vs measured goodput."""
    from pathlib import Path

    from ray_adaptive.experiments.figures import pyplot, save

    plt = pyplot()
    out_dir = Path(out_dir)
    paths = []
    archs = sorted({r["architecture"] for r in rows})
    for key, label in (("goodput", "goodput (tasks/s)"), ("jfi", "Jain's fairness index")):
        fig, ax = plt.subplots(figsize=(5, 3.5))
        for a in archs:
            pts = sorted((r["rate"], r[key]) for r in rows if r["architecture"] == a)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=a)
        ax.set_xlabel("arrival rate (tasks/s)")
        ax.set_ylabel(label)
        ax.set_title(f"DRF-LB on Ray: {label}")
        ax.legend()
        save(fig, out_dir / f"ray_{key}_vs_rate.png", paths, dpi=120)
    est = [r for r in rows if r.get("est_goodput") is not None]
    if est:
        fig, ax = plt.subplots(figsize=(4.5, 4))
        for a in archs:
            pts = [(r["est_goodput"], r["goodput"]) for r in est if r["architecture"] == a]
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], label=a)
        top = max(max(r["est_goodput"], r["goodput"]) for r in est) * 1.05
        ax.plot([0, top], [0, top], color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel("estimated goodput (tasks/s)")
        ax.set_ylabel("measured goodput on Ray (tasks/s)")
        ax.legend()
        save(fig, out_dir / "ray_estimated_vs_measured.png", paths, dpi=120)
    return paths


def reproduce_ray(out_dir="out/reproduce_ray", quick: bool = False, nodes: int = 6,
                  rates: Optional[Sequence[float]] = None, plans: Sequence[str] = PLANS,
                  echo: Callable[[str], None] = print) -> List[dict]:
    """``ray-adaptive reproduce --ray``: a local cluster of ``nodes`` single-executor nodes (unless
    Ray is already connected), every plan at every rate; writes ray_sweep.csv and the PNGs."""
    from pathlib import Path

    import pandas as pd
    import ray

    from ray_adaptive.local_multinode import local_cluster

    exp = RayExperiment(seconds=2.0 if quick else 4.0)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    def sweep() -> List[dict]:
        n, executors, _ = cluster_shape()
        cap = exp.capacity(executors)
        chosen = rates or ([0.5 * cap, 1.5 * cap] if quick else [0.5 * cap, 0.9 * cap, 1.2 * cap, 1.6 * cap])
        echo(f"{n} nodes, one executor per CPU, tasks of {exp.duration_s * 1e3:.0f} ms: execution bound {cap:.0f} tasks/s; "
             f"rates {', '.join(f'{r:.0f}' for r in chosen)}; {exp.seconds:g} s of arrivals per run")
        return run_sweep(exp, chosen, plans, progress=lambda r: echo(
            f"  rate {r['rate']:.0f} {r['plan']}: goodput {r['goodput']:.1f}/s, JFI {r['jfi']:.3f}"))

    if ray.is_initialized():
        rows = sweep()
    else:
        echo(f"starting a local Ray cluster of {nodes} nodes ...")
        with local_cluster(num_nodes=nodes, num_cpus=1):
            rows = sweep()
    pd.DataFrame(rows).to_csv(out / "ray_sweep.csv", index=False)
    paths = plot_rows(rows, out)
    echo("\n" + format_rows(rows))
    echo(f"\nwrote {out / 'ray_sweep.csv'} and {', '.join(p.name for p in paths)}")
    return rows
