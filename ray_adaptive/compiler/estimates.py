"""Stage 3 of the compiler: latency, throughput and decision quality of each plan.

**Latency** (paper, Section 5.2) is the sum of the latencies of the units a
task passes through: the measured compute of the execution units placed on
each role, plus the modelled messages (receive, send to a node or forward,
finish notification) and probes (per node probed). A task is *received*,
*decided* (its Score units, with the probes of the plan's load view),
*sent*; its finish comes back as a notification to the role whose State
OnFinish changes. Hooks run with the message that triggers them.

**Throughput** = ``min(1 / sum(U_c), k / sum(U_d))`` over the selector's
units U_c and the decentralized (or placement) schedulers' units U_d, each
side scaled by the share of its time left over by periodic work (heartbeat
rounds, state syncs). ``k`` is the effective number of decentralized
schedulers: tasks enter at their submitter's home scheduler, so the busiest
home decides (``1 / max share``); the hybrid's selector spreads evenly.

**Quality** is the competitive ratio from replaying a window of the trace
under the plan (:mod:`ray_adaptive.sim.plan_sim`): at each decision,
``Score_ideal(t_impl, n_impl)`` against the ideal decision on the exact
global state, aggregated as the mean (see
:func:`ray_adaptive.sim.metrics.competitive_ratio`). When the trace offers
more than the cluster can execute, the replay starts from the steady state
of an overloaded cluster (every slot busy), so a short window shows the
contention a long run would.

The simulator charges exactly these latencies as scheduler busy time, so
estimated throughput and simulated goodput agree where a scheduler is the
bottleneck; quality comes from the replay, not from a formula.
"""

from __future__ import annotations

import dataclasses
import gc
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from ray_adaptive.compiler.plans import Plan
from ray_adaptive.compiler.profile import Profile
from ray_adaptive.compiler.units import NODE, NONE, TASK, Analysis, score_split
from ray_adaptive.dsl import ir
from ray_adaptive.sim import metrics as M
from ray_adaptive.sim.plan_sim import simulate
from ray_adaptive.sim.plans import RoleCosts, SimPlan
from ray_adaptive.sim.scenario import Scenario

__all__ = ["Step", "Estimate", "lower", "estimate_cost", "estimate_quality", "effective_parallelism", "ideal_scale"]


@dataclass(frozen=True)
class Step:
    """One contribution to a plan's latency: ``seconds`` of ``role`` time per task."""

    role: str  # "selector" | "schedulers"
    what: str
    seconds: float

    def as_dict(self) -> dict:
        return {"role": self.role, "what": self.what, "seconds": round(self.seconds, 9)}


@dataclass(frozen=True)
class Estimate:
    """A plan's three estimates and how they were obtained."""

    plan: Plan
    steps: tuple[Step, ...]
    latency_s: float  # sum of every step: the paper's plan latency
    selector_s: float  # sum(U_c): selector time per task (0: no selector)
    scheduler_s: float  # sum(U_d): one decentralized/placement scheduler's time per task (0: none)
    overhead: dict  # busy fraction of periodic work per role
    parallelism: float  # effective k
    throughput: float  # tasks/s the schedulers can decide
    competitive_ratio: float = float("nan")
    quality: dict = field(default_factory=dict)  # p90, n, the replay's goodput and JFI, ...

    def as_dict(self) -> dict:
        return {
            "name": self.plan.name, "architecture": self.plan.architecture,
            "approximations": list(self.plan.approximations),
            "latency_s": round(self.latency_s, 7), "throughput": round(self.throughput, 1),
            "competitive_ratio": round(self.competitive_ratio, 4),
            "selector_s": round(self.selector_s, 7), "scheduler_s": round(self.scheduler_s, 7),
            "parallelism": round(self.parallelism, 2), "overhead": self.overhead,
            "steps": [s.as_dict() for s in self.steps], "quality": self.quality,
        }


def _hook_units(analysis: Analysis, name: str) -> list[str]:
    return [u.id for u in analysis.hook_units if u.function == name]


def _hook_writes(analysis: Analysis, name: str, vars_: set[str]) -> bool:
    return any(set(u.state_writes) & vars_ for u in analysis.hook_units if u.function == name)


def _score_split(analysis: Analysis) -> tuple[list[str], list[str], list[str]]:
    """Score unit ids: (task side, node side, joint)."""
    task, node, joint = [], [], []
    for u in analysis.score_units:
        (task if u.side in (TASK, NONE) else node if u.side == NODE else joint).append(u.id)
    return task, node, joint


def _part_policy(policy: ir.Policy, expr: Optional[ir.Expr], whole: bool = False) -> ir.Policy:
    """``policy`` with Score replaced by ``return expr`` (0 when None), or kept when ``whole``."""
    if whole:
        return policy
    body = (ir.Return(expr if expr is not None else ir.Const(0, ir.INT)),)
    return dataclasses.replace(policy, score=dataclasses.replace(policy.score, body=body))


def _selector_hooks(policy: ir.Policy, plan: Plan) -> ir.Policy:
    """``policy`` with only the hook statements ``plan`` places on the selector: one that reads the node
    (round robin's ``next = node.index + 1``) runs where the node is chosen, on a placement scheduler."""
    where = dict(plan.placement)
    hooks = tuple(dataclasses.replace(h, body=tuple(st for i, st in enumerate(h.body)
                                                    if "selector" in where.get(f"{h.name}.{i + 1}", "selector")))
                  for h in policy.hooks)
    return dataclasses.replace(policy, hooks=hooks)


def _role_costs(analysis: Analysis, profile: Profile, plan: Plan, nodes: int, role: str) -> tuple[RoleCosts, list[Step], float]:
    """What one scheduler of ``role`` is charged, its per-task steps, and its periodic busy fraction."""
    m, arch = profile.message_s, plan.architecture
    task_ids, node_ids, joint_ids = _score_split(analysis)
    has_finish = bool(_hook_units(analysis, "OnFinish"))
    steps: list[Step] = []
    if arch == "hybrid" and role == "selector":
        compute_ids, decides = task_ids + joint_ids, False
        hooks, finish_needed = ("OnArrival", "OnDispatch", "OnFinish"), True  # slot accounting needs finishes
        send_what = "forward to a placement scheduler"
    elif arch == "hybrid":
        compute_ids, decides = node_ids + joint_ids, True
        hooks = ("OnDispatch", "OnFinish") if plan.sync.kind != "exact" else ()
        finish_needed = has_finish and plan.sync.kind != "exact"
        send_what = "send to the node"
    else:
        compute_ids, decides = task_ids + node_ids + joint_ids, True
        hooks, finish_needed = ("OnArrival", "OnDispatch", "OnFinish"), has_finish
        send_what = "send to the node"
    units = {u.id: u for u in analysis.units}
    order = [u.id for u in analysis.units]
    compute_ids = sorted(compute_ids, key=order.index)
    synced = {v for v, where in plan.state if "replicas" in where}
    instant = plan.sync.kind == "instant" and role == "schedulers"
    store = profile.store_s

    recv = m + profile.compute(_hook_units(analysis, "OnArrival") if "OnArrival" in hooks else [])
    steps.append(Step(role, "receive the task" + (" + OnArrival" if "OnArrival" in hooks and _hook_units(analysis, "OnArrival") else ""), recv))
    compute = 0.0
    for uid in compute_ids:
        c = profile.compute([uid])
        compute += c
        steps.append(Step(role, f"{uid} {units[uid].label}", c))
    if instant:
        compute += store
        steps.append(Step(role, "read State from the store", store))
    probes = plan.load.probes(nodes) if decides else 0
    if probes:
        steps.append(Step(role, f"probe {probes} node{'s' if probes > 1 else ''}", probes * profile.probe_s))
    send = m + profile.compute(_hook_units(analysis, "OnDispatch") if "OnDispatch" in hooks else [])
    if instant and _hook_writes(analysis, "OnDispatch", synced):
        send += store
    steps.append(Step(role, send_what + (" + OnDispatch" if "OnDispatch" in hooks and _hook_units(analysis, "OnDispatch") else ""), send))
    finish = 0.0
    if finish_needed:
        finish = m + profile.compute(_hook_units(analysis, "OnFinish") if "OnFinish" in hooks else [])
        if instant and _hook_writes(analysis, "OnFinish", synced):
            finish += store
        steps.append(Step(role, "finish notification" + (" + OnFinish" if "OnFinish" in hooks and has_finish else ""), finish))
    heartbeat = nodes * profile.heartbeat_s if plan.load.kind == "cached" and decides else 0.0
    sync = 2 * store if plan.sync.kind == "periodic" and role == "schedulers" else 0.0
    periodic = (heartbeat / plan.load.period_s if heartbeat else 0.0) + (sync / plan.sync.period_s if sync else 0.0)
    costs = RoleCosts(recv_s=recv, send_s=send, finish_s=finish, compute_s=compute,
                      probe_s=profile.probe_s if decides else 0.0, sync_s=sync, heartbeat_s=heartbeat)
    return costs, steps, periodic


def effective_parallelism(plan: Plan, scenario: Scenario, nodes: int) -> float:
    """k for the throughput formula: ``1 / max share`` of tasks entering one scheduler (decentralized)."""
    k = plan.k(nodes)
    if plan.architecture != "decentralized" or not scenario.tasks:
        return float(k)
    homes: dict[str, int] = {}
    count = np.zeros(k)
    rr = 0
    for t in sorted(scenario.tasks, key=lambda t: (t.arrival, t.id)):
        if t.submitter:
            home = homes.setdefault(t.submitter, len(homes) % k)
        else:
            home, rr = rr % k, rr + 1
        count[home] += 1
    return float(count.sum() / count.max())


def lower(plan: Plan, analysis: Analysis, profile: Profile, nodes: int) -> SimPlan:
    """The plan as the simulator (and, later, the runtime) runs it."""
    policy = analysis.policy
    central = local = RoleCosts()
    if plan.architecture in ("centralized", "hybrid"):
        central, _, _ = _role_costs(analysis, profile, plan, nodes, "selector")
    if plan.architecture in ("decentralized", "hybrid"):
        local, _, _ = _role_costs(analysis, profile, plan, nodes, "schedulers")
    task_policy = node_policy = None
    if plan.architecture == "hybrid":
        sep = analysis.separability
        if sep.form in ("task-only", "constant"):
            task_policy, node_policy = _part_policy(policy, None, whole=sep.form == "task-only"), _part_policy(policy, None)
        elif sep.form == "node-only":
            task_policy, node_policy = _part_policy(policy, None), policy
        else:
            task_policy, node_policy = _part_policy(policy, sep.task_expr), _part_policy(policy, sep.node_expr)
        task_policy = _selector_hooks(task_policy, plan)
    merge = tuple((v.name, v.merge if v.merge != "const" else "none") for v in analysis.state if v.dynamic)
    return SimPlan(
        name=plan.name, architecture=plan.architecture, policy=policy, load=plan.load, sync=plan.sync,
        central=central, local=local, schedulers=plan.schedulers, task_policy=task_policy, node_policy=node_policy,
        local_state=plan.architecture == "hybrid" and plan.sync.kind != "exact", merge=merge,
        delta_hooks=analysis.delta_hooks(), split=score_split(policy),
        task_split=score_split(task_policy) if task_policy else None,
        node_split=score_split(node_policy) if node_policy else None,
    )


def estimate_cost(plan: Plan, analysis: Analysis, profile: Profile, nodes: int, parallelism: Optional[float] = None) -> Estimate:
    """Latency and throughput of ``plan`` (quality is filled in by :func:`estimate_quality`)."""
    steps: list[Step] = []
    sel = loc = 0.0
    overhead: dict[str, float] = {}
    tp = []
    k = float(parallelism if parallelism is not None else plan.k(nodes))
    if plan.architecture in ("centralized", "hybrid"):
        _, s, o = _role_costs(analysis, profile, plan, nodes, "selector")
        steps += s
        sel = sum(x.seconds for x in s)
        overhead["selector"] = round(o, 4)
        tp.append((1 - o) / sel if sel > 0 else float("inf"))
    if plan.architecture in ("decentralized", "hybrid"):
        _, s, o = _role_costs(analysis, profile, plan, nodes, "schedulers")
        steps += s
        loc = sum(x.seconds for x in s)
        overhead["schedulers"] = round(o, 4)
        tp.append(k * (1 - o) / loc if loc > 0 else float("inf"))
    return Estimate(plan, tuple(steps), sel + loc, sel, loc, overhead, k, min(tp))


def ideal_scale(policy: ir.Policy, window: Scenario) -> float:
    """The yardstick of the competitive ratio: the median |score| of the ideal scheduler's decisions on ``window``.

    The same for every plan (see :func:`ray_adaptive.sim.metrics.competitive_ratio`).
    """
    from ray_adaptive.sim.replay import replay

    return M.score_scale([d.score for d in replay(policy, window, deadline="dispatch").decisions])


def _replay(args) -> dict:
    """One plan's replay, reduced to what its estimates need (runs in a worker process when the compiler fans out).

    The score scale is applied by :func:`_summarise`, so replays need not wait for :func:`ideal_scale`.
    """
    sim_plan, window, seed, prefill, cr_from, settle, arch = args
    # (the window's fields were checked against the policy once, by workload_window)
    r = simulate(sim_plan, window, seed=seed, prefill=prefill, cr_from=cr_from, settle=settle, validate=False)
    mt = r.metrics()
    role = "selector" if arch != "decentralized" else "scheduler"
    decided = sum(s.decisions for s in r.schedulers if s.role == role)
    attempts = sum(s.attempts for s in r.schedulers if s.role == role)
    return {"cr_impl": r.cr_impl, "cr_ideal": r.cr_ideal, "replay_goodput": mt.goodput, "replay_jfi": mt.jfi,
            "bounces": mt.bounces, "attempts_per_decision": round(attempts / decided, 3) if decided else None}


def _summarise(raw: dict, scale: float, limit: Optional[float]) -> dict:
    cr = M.competitive_ratio(raw["cr_impl"], raw["cr_ideal"], scale=scale, limit=limit)
    return {"cr": cr, "quality": {
        "p90": cr["p90"], "above_limit": cr["above_limit"], "decisions": cr["n"], "scale": cr["scale"],
        "replay_goodput": raw["replay_goodput"], "replay_jfi": raw["replay_jfi"], "bounces": raw["bounces"],
        "attempts_per_decision": raw["attempts_per_decision"]}}


def _ideal_scale_job(args) -> float:
    return ideal_scale(*args)


def _expected_cost(job) -> float:
    """Relative wall time of a job (measured on DRF-LB), to hand out the longest first: the ideal replay
    for the score scale runs the whole window (76 ms at 700 tasks/s) where a plan's stops once
    settled (15-40 ms), so it goes first rather than straggle at the end."""
    kind, payload = job
    if kind == "scale":
        return 4.0
    plan, arch = payload[0], payload[-1]
    return (2.0 if arch == "decentralized" else 1.0) * (1.5 if plan.load.kind == "cached" else 1.0)


def _job(args):
    kind, payload = args
    return _ideal_scale_job(payload) if kind == "scale" else _replay(payload)


def _run_jobs(jobs: list, workers: int) -> list:
    """Every job's result, computed here and in ``workers - 1`` forked processes.

    Each process takes the next job, longest first, whenever it is free. This
    process works too (a pool of ``workers`` would leave it waiting: on 2 CPUs,
    one fork instead of two), the forked ones inherit the jobs, and a process's
    results are its only message.
    """
    workers = min(workers, len(jobs))
    if workers <= 1:
        return [_job(j) for j in jobs]
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    order = sorted(range(len(jobs)), key=lambda i: -_expected_cost(jobs[i]))
    taken = ctx.Value("i", 0)

    def work() -> list:
        done = []
        while True:
            with taken.get_lock():
                k = taken.value
                taken.value += 1
            if k >= len(order):
                return done
            done.append((order[k], _job(jobs[order[k]])))

    children = []
    for _ in range(workers - 1):
        receive, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_forked_worker, args=(work, send), daemon=True)
        child.start()
        send.close()
        children.append((child, receive))
    try:
        results = dict(work())
        for child, receive in children:
            try:
                ok, payload = receive.recv()
            except EOFError:
                raise RuntimeError("a replay process died") from None
            if not ok:
                raise payload
            results.update(payload)
    except BaseException:
        for child, _ in children:  # no orphan keeps replaying
            child.terminate()
        raise
    finally:
        for child, _ in children:
            child.join()
    return [results[i] for i in range(len(jobs))]


def _forked_worker(work, send) -> None:
    """A forked process's life: its share of the jobs, sent back (an error too). It exits after: the cyclic
    garbage collector would only touch -- and so copy -- the parent's pages."""
    gc.disable()
    try:
        send.send((True, work()))
    except BaseException as e:  # noqa: BLE001 -- handed to the parent, which raises it
        send.send((False, e))
    finally:
        send.close()


def estimate_quality(estimates: Sequence[Estimate], analysis: Analysis, profile: Profile, window: Scenario,
                     seed: int = 0, prefill: bool = False, limit: Optional[float] = None,
                     scale: Optional[float] = None, warm: float = 1 / 3, workers: int = 1,
                     settle: bool = True) -> list[Estimate]:
    """Replay ``window`` under every plan; fill in the competitive ratio (one score scale for all plans).

    The first ``warm`` share of the window (by arrivals) brings each plan to
    its own steady state (its backlogs, its State); decisions after it are
    sampled (``window`` carries the policy's fields: :func:`~ray_adaptive.compiler.pipeline.workload_window`
    checked them). With ``settle``, a plan's replay stops once its mean ratio is
    settled against ``limit`` (:class:`~ray_adaptive.sim.metrics.Settle`: at
    least 100 decisions; far from the limit, about a third of the window).
    ``workers`` > 1 replays in that many processes (the same result).
    """
    nodes = len(window.nodes)
    cr_from = window.tasks[int(len(window.tasks) * warm)].arrival if window.tasks and warm > 0 else 0.0
    rule = M.Settle(limit) if settle else None
    jobs = [("replay", (lower(e.plan, analysis, profile, nodes), window, seed, prefill, cr_from, rule,
                        e.plan.architecture)) for e in estimates]
    if scale is None:  # the ideal replay runs beside the plans'
        jobs.insert(0, ("scale", (analysis.policy, window)))
    raw = _run_jobs(jobs, workers)
    if scale is None:
        scale, raw = raw[0], raw[1:]
    results = [_summarise(r, scale, limit) for r in raw]
    return [dataclasses.replace(e, competitive_ratio=r["cr"]["mean"], quality=r["quality"])
            for e, r in zip(estimates, results)]
