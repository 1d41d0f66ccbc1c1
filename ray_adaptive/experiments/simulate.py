"""What-if for any policy: ``ray-adaptive simulate POLICY``.

Any shipped or user policy, any plan the compiler lists (or all of them),
on a workload of tenants (``--tenants``: shares, Task field values such as
weights) or a trace or workload file (``--workload``), at a list of rates
(a sweep, like ``reproduce``) or at a rate that changes over time (a rate
profile: steps, a ramp, a diurnal sine, bursts). Out come the same files as
``reproduce``:

* a sweep: ``sweep.csv`` (a row per rate and plan: simulated goodput, JFI,
  competitive ratio with its interval; the compiler's estimates), figures of
  goodput, JFI and competitive ratio against the rate and estimated against
  simulated goodput, and the table of the compiler's choice against the
  simulator's best plan per rate;
* a rate over time: ``timeline.csv`` (a row per epoch and plan: offered
  rate, goodput, JFI, competitive ratio), a figure of each over time, and
  each plan's totals beside the compiler's static choice at the profile's
  mean and peak rates.

**The adaptive run** (``--adaptive``). Beside the static plans, the same
workload under the runtime's adaptive controller
(:class:`~ray_adaptive.sim.adaptive.AdaptiveRun`): the compiler's estimate
table for the simulated cluster (:func:`adaptive_setup`), the controller
evaluated every ``every_s`` on the simulated workload, each switch verdict
switching the simulation live with a pause. Its timeline rows are named
``adaptive`` and carry the plan in force (``in_force``); its totals row
lists its switches.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from ray_adaptive.control import Controller, EstimateTable, Settings
from ray_adaptive.compiler import Profile, compile_policy, estimate_table, lower
from ray_adaptive.compiler.estimates import busy_level, effective_parallelism, estimate_cost
from ray_adaptive.compiler.pipeline import MAX_SPAN_S
from ray_adaptive.dsl import load_policy
from ray_adaptive.dsl.ir import Policy, field_checker
from ray_adaptive.dsl.lengths import vec_lengths
from ray_adaptive.errors import ScenarioError
from ray_adaptive.experiments.figures import pyplot, save
from ray_adaptive.experiments.sweep import choice_agreement, plan_space, sweep, trace_seconds
from ray_adaptive.experiments.workload import Experiment
from ray_adaptive.plan import LoweredPlan
from ray_adaptive.sim.adaptive import SWITCH_PAUSE_S, AdaptiveRun
from ray_adaptive.sim.plan_sim import PlanSim, periodic_overload
from ray_adaptive.sim.timeline import Epoch, run_epochs
from ray_adaptive.workload.limits import MAX_RATE, check_rate, check_tasks
from ray_adaptive.workload.rates import RateProfile, parse_profile
from ray_adaptive.workload.scenario import load_scenario
from ray_adaptive.workload.tenants import WorkloadSpec, load_workload_spec, parse_tenants

__all__ = ["build_experiment", "check_tenant_fields", "parse_rates", "check_run", "resolve_plans", "run_sweep", "run_profile", "format_choices",
           "plot_sweep", "plot_timeline", "Adaptive", "adaptive_setup", "adaptive_run", "format_switches"]

PAPER_TENANTS = "a:1,b:1,greedy:3"
DEFAULT_FRACTIONS = (0.4, 0.8, 1.0, 1.2, 1.6)


def build_experiment(policy: str, *, tenants: Optional[str] = None, workload: Optional[str] = None,
                     nodes: int = 12, executors: int = 1, queue: int = 2, duration: Optional[float] = None,
                     arrivals: Optional[str] = None, durations: Optional[str] = None, timeout: Optional[float] = None,
                     limit: Optional[float] = None) -> tuple[Experiment, Optional[RateProfile], Optional[float]]:
    """The experiment ``simulate`` runs, the rate profile the workload file gives (if any), and its length.

    ``tenants``: inline spec or a JSON workload file; ``workload``: a trace (.csv / .parquet), a scenario
    file's tasks (.json with ``tasks``) or a JSON workload file. Neither: the paper's three tenants.
    """
    p = load_policy(policy)  # (an unknown policy fails here, before any work)
    spec: Optional[WorkloadSpec] = None
    trace: tuple = ()
    for given in (tenants, workload):
        if given is None:
            continue
        if given.endswith(".json") and given is workload and _is_scenario(given):
            trace = load_scenario(given).tasks  # a scenario file's tasks: a trace
        elif given.endswith(".json"):
            spec = load_workload_spec(given)
            check_tenant_fields(p, spec, given)
        elif given.endswith((".csv", ".parquet", ".pq")):
            from ray_adaptive.workload.trace import read_trace

            trace = read_trace(given)
        elif given is tenants:
            spec = parse_tenants(given)
            check_tenant_fields(p, spec, "--tenants")
        else:
            raise ValueError(f"--workload must be a trace (.csv, .parquet) or a workload file (.json), found {given!r}")
    if spec is None and not trace:
        spec = parse_tenants(PAPER_TENANTS)
    kwargs = dict(policy=policy, nodes=nodes, executors=executors, queue=queue, limit=limit)
    if trace:
        exp = Experiment("trace", shares=(("trace", 1.0),), trace=trace, **kwargs)
        return exp, None, None
    kw = {k: v for k, v in (("duration", duration if duration is not None else spec.duration),
                            ("arrivals", arrivals or spec.arrivals), ("durations", durations or spec.durations),
                            ("timeout", timeout if timeout is not None else spec.timeout)) if v is not None}
    exp = Experiment("tenants", shares=tuple((t.name, t.share) for t in spec.tenants),
                     fields=tuple((t.name, t.fields) for t in spec.tenants if t.fields),
                     clients=tuple((t.name, t.clients) for t in spec.tenants if t.clients), **kw, **kwargs)
    return exp, spec.rate, spec.seconds


def check_tenant_fields(policy: Policy, spec: WorkloadSpec, where: str) -> None:
    """Refuse a tenant's field the policy does not declare (it would be dropped without a word), or
    a value its type or vec length refuses; ``where``: ``--tenants`` or the workload file."""
    lengths = vec_lengths(policy)
    sized = {k[len("task."):]: n for k, n in lengths.items() if k.startswith("task.")}
    problem_of = field_checker(policy.task_fields, sized, partial=True)
    for t in spec.tenants:
        problem = problem_of(dict(t.fields))
        if problem is None:
            continue
        kind, name, typ = problem
        at = f"{where}: tenant {t.name!r}"
        if kind == "unknown":
            declared = ", ".join(d.name for d in policy.task_fields) or "none"
            raise ScenarioError(f"{at}: unknown field {name!r}; policy {policy.name} declares: {declared}")
        value = dict(t.fields)[name]
        if kind == "length":
            raise ScenarioError(f"{at}: field {name!r} must be a vec of length {sized.get(name)}"
                                f"{lengths.why('task.' + name)}, found {value!r}")
        raise ScenarioError(f"{at}: field {name!r} must be {typ}{_MEANING.get(typ.kind, '')}, found {value!r}")


_MEANING = {"int": " (a 64-bit integer)", "float": " (a finite number)", "vec": " (a list of finite numbers)",
            "map": " (an object)"}


def _is_scenario(path: str) -> bool:
    """Whether a JSON file is a scenario (nodes and tasks) rather than a workload spec (tenants)."""
    import json

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False  # (the workload spec's reader says what is wrong with it)
    return isinstance(data, dict) and "tasks" in data and "tenants" not in data


def parse_rates(text: Optional[str], capacity: float) -> "list[float] | RateProfile":
    """``--rates``: comma-separated tasks/s or percentages of the execution bound (``50%``), or a rate
    profile (``ramp:0=100,10=900``); None: 40% to 160% of the execution bound. Each rate is a finite
    number in (0, MAX_RATE], as ``compile --rate`` takes; an empty text or item is refused."""
    if text is None:
        return [_rounded(f * capacity) for f in DEFAULT_FRACTIONS]
    if not text.strip():
        raise ValueError("--rates is empty: give rates (200,400), percentages of the execution bound (50%,120%) "
                         "or a rate profile (ramp:0=100,10=900)")
    if ":" in text:
        try:
            return parse_profile(text)
        except ValueError as err:
            raise ValueError(f"--rates: {err}") from None
    parts = [x.strip() for x in text.split(",")]
    if not all(parts):
        raise ValueError(f"--rates: an empty item in {text!r}; rates are comma-separated, e.g. 200,400")
    return [_rate(part, capacity) for part in parts]


def _rate(part: str, capacity: float) -> float:
    """One item of ``--rates``: tasks/s, or a percentage of the execution bound."""
    percent = part.endswith("%")
    try:
        x = float(part[:-1] if percent else part)
    except ValueError:
        raise ValueError(f"--rates must be comma-separated numbers (tasks/s), percentages of the execution bound "
                         f"(50%), or a rate profile (ramp:0=100,10=900); found {part!r}") from None
    if percent:
        if not (math.isfinite(x) and x > 0):
            raise ValueError(f"--rates: {part!r} is not a percentage > 0 of the execution bound")
        x = _rounded(x / 100 * capacity)
    check_rate(x, "--rates" if not percent else f"--rates {part} (of {capacity:.4g} tasks/s)")
    return x


def _rounded(rate: float) -> float:
    """A rate to one decimal -- or, below 1 task/s, to 3 significant digits (0.0033 is not 0)."""
    r = round(rate, 1)
    return r if r >= 1 else float(f"{rate:.3g}")


def check_run(exp: Experiment, given: "list[float] | RateProfile", seconds: float, window: int = 600) -> None:
    """Refuse, before any work, what the simulator cannot hold -- an execution bound over MAX_RATE (a
    mean task duration too short for the cluster), more tasks in all than MAX_SIM_TASKS -- or the
    compiler cannot replay: a rate so low that its window of ``window`` tasks spans more than its
    limit of simulated seconds (the compiler's choice is made at every rate)."""
    if not exp.trace and not exp.capacity <= MAX_RATE:
        raise ValueError(f"--duration {exp.duration:g}: the execution bound would be {exp.capacity:.3g} tasks/s "
                         f"({exp.nodes} nodes x {exp.executors} executors / {exp.duration:g} s), over the limit of "
                         f"{MAX_RATE:g} tasks/s: give a longer --duration")
    cap = len(exp.trace) if exp.trace else math.inf  # (a trace is replayed, never more than itself)
    if isinstance(given, list):
        tasks = sum(min(cap, r * seconds) for r in given)
        what = f"--rates {','.join(f'{r:g}' for r in given)} over --seconds {seconds:g}"
        compiled = list(given)
    else:
        tasks = min(cap, given.peak(seconds) * seconds)  # (arrivals are drawn at the peak rate, then thinned)
        what = f"--rates {given.label()} over --seconds {seconds:g}"
        compiled = [r for r in (given.mean(seconds), given.peak(seconds)) if r > 0]
    check_tasks(tasks, what, "lower --rates or --seconds")
    for r in compiled:
        if window / r > MAX_SPAN_S:
            raise ValueError(f"at {r:.3g} tasks/s the compiler's window of {window} tasks would span "
                             f"{window / r:,.0f} simulated seconds, over its limit of {MAX_SPAN_S:,.0f}: raise --rates "
                             f"(the execution bound is {exp.capacity:.3g} tasks/s) or lower --window")


def resolve_plans(policy: str, nodes: int, plans: Sequence[str]) -> list[str]:
    """Plan names to simulate: ``all`` for every plan the compiler lists; errors list the plans there are."""
    _, space = plan_space(policy, nodes)
    if not plans or list(plans) == ["all"]:
        return list(space)
    for name in plans:
        if name not in space:
            raise ValueError(f"no plan {name!r} for policy {load_policy(policy).name!r}; plans: "
                             f"{', '.join(space)}, or all")
    return list(plans)


def run_sweep(exp: Experiment, plans: Sequence[str], rates: Sequence[float], seconds: float, warmup: float,
              profile: Profile, seed: int = 0, progress: Optional[Callable[[str], None]] = None,
              workers: Optional[int] = None, window: int = 600) -> list[dict]:
    """Every plan at every rate, and the compiler's choice: :func:`~ray_adaptive.experiments.sweep.sweep`
    (``window``: the fewest tasks the compiler replays)."""
    return sweep(exp, rates, seconds, warmup, plans=list(plans), profile=profile, seed=seed, progress=progress,
                 workers=workers, window=window)


def format_choices(rows: Sequence[dict]) -> str:
    """The compiler's choice against the simulator's best plan (among those simulated), per rate."""
    head = ("rate (tasks/s)", "chosen", "CR est", "CR sim", "goodput", "best (simulated)", "agrees")
    lines = []
    for a in choice_agreement(rows):
        c = next(r for r in rows if r["rate"] == a["rate"] and r["chosen"])
        lines.append((f"{a['rate']:g}", a["chosen"], _fmt(c["cr_est"]), _fmt(c["cr_sim"]), f"{c['goodput']:.0f}",
                      ", ".join(a["best"][:3]) + (" ..." if len(a["best"]) > 3 else ""),
                      "yes" if a["agrees"] else "no"))
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(r) for r in lines])


def _fmt(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


@dataclass(frozen=True)
class Adaptive:
    """What an adaptive simulated run needs: the compiler's estimate table for the simulated cluster,
    every plan of it lowered (those that can run), the controller's settings and a switch's pause."""

    table: EstimateTable
    plans: Mapping[str, LoweredPlan]
    settings: Settings = field(default_factory=Settings)
    pause_s: float = SWITCH_PAUSE_S


def adaptive_setup(exp: Experiment, rate: RateProfile, seconds: float, profile: Profile, *, window: int = 600,
                   seed: int = 0, settings: Optional[Settings] = None, pause_s: float = SWITCH_PAUSE_S,
                   fractions: Optional[Sequence[float]] = None) -> Adaptive:
    """The estimate table on the experiment's workload (a window of it at the profile's mean rate, scaled
    to each grid rate: its mix and durations kept), and every plan that can run here, lowered."""
    analysis, space = plan_space(exp.policy, exp.nodes)
    mean = rate.mean(seconds)
    if not mean > 0:  # (the estimate table is made on a trace at the mean rate)
        raise ValueError(f"--adaptive: the rate {rate.label()} is 0 throughout the {seconds:g} s run: no task "
                         f"arrives, so there is nothing to adapt to; give a rate above 0")
    trace = exp.workload(mean, trace_seconds(mean, window, timeout=exp.timeout), seed=seed + 1).tasks
    kw = {"fractions": tuple(fractions)} if fractions else {}
    table = estimate_table(load_policy(exp.policy), nodes=exp.nodes, executors=exp.executors, queue=exp.queue,
                           trace=trace, profile=profile, measure=False, window=window, limit=exp.limit, seed=seed,
                           workers=1, **kw)
    lowered = {p.name: lower(space[p.name], analysis, profile, exp.nodes) for p in table.plans}
    runnable = {name: lp for name, lp in lowered.items() if not periodic_overload(lp)}
    return Adaptive(table, runnable, settings or Settings(), pause_s)


def _start(exp: Experiment, plan, lowered: LoweredPlan, analysis, sc, rate: RateProfile, profile: Profile,
           seed: int) -> PlanSim:
    """A run of ``plan`` on ``sc``, its nodes as busy as the plan keeps them at the profile's first rate."""
    est = estimate_cost(plan, analysis, profile, exp.nodes, effective_parallelism(plan, sc, exp.nodes))
    return PlanSim(lowered, sc, seed=seed, prefill=busy_level(rate.at(0.0), est.throughput, exp.capacity),
                   cr_every=2)


def adaptive_run(exp: Experiment, setup: Adaptive, sc, rate: RateProfile, profile: Profile,
                 seed: int = 0) -> AdaptiveRun:
    """The adaptive run of ``sc`` (not yet advanced): it starts with the compiler's choice at the
    profile's first rate; pass its ``on_epoch`` to :func:`~ray_adaptive.sim.timeline.run_epochs`."""
    analysis, space = plan_space(exp.policy, exp.nodes)
    first = setup.table.at(rate.at(0.0))[1]
    if first not in setup.plans:
        raise ValueError(f"the compiler's choice at {rate.at(0.0):.0f} tasks/s, {first!r}, cannot run here")
    sim = _start(exp, space[first], setup.plans[first], analysis, sc, rate, profile, seed)
    return AdaptiveRun(sim, Controller(setup.table, setup.settings, first), setup.plans, setup.pause_s)


def _busy_per_1k(sim: PlanSim) -> float:
    """The schedulers' busy seconds per 1,000 tasks decided (every plan in force: switched-from ones too)."""
    decided = sum(1 for t in sim.tasks if t.dispatched_at is not None)
    busy = sum(s.busy_s for s in sim.result().schedulers)
    return round(1e3 * busy / decided, 4) if decided else math.nan


def _run(name: str, sim: PlanSim, every: float, on_epoch: Optional[Callable[[Epoch, PlanSim], None]],
         t0: float) -> tuple[list[dict], dict]:
    """Run ``sim`` epoch by epoch: its timeline rows (the plan in force in ``in_force``) and its totals."""
    epochs = run_epochs(sim, every, on_epoch=on_epoch)
    m = sim.result().metrics()
    rows = [{**e.as_dict(), "plan": name, "in_force": e.plan} for e in epochs]
    return rows, {"plan": name, "architecture": sim.plan.architecture.value if name != "adaptive" else "adaptive",
                  "goodput": m.goodput, "jfi": m.jfi, "cr_sim": m.cr["mean"], "offered": m.offered,
                  "dropped": m.dropped, "busy_s_per_1k": _busy_per_1k(sim), "events": sim.events,
                  "sim_s": round(time.perf_counter() - t0, 3)}


def format_switches(total: dict) -> str:
    """An adaptive run's switches, a line each (from its totals row)."""
    head = f"    started with {total['started_with']}; {len(total['switches'])} switch(es) in {total['evaluations']} evaluations"
    return "\n".join([head] + [f"    {x['time']:7.1f} s  {x['from']} -> {x['to']}  (measured {x['rate']:.0f} tasks/s; "
                                f"{x['reason']})" for x in total["switches"]])


def _both(*callbacks):
    """One ``on_epoch`` calling each given one in turn."""
    given = [c for c in callbacks if c is not None]

    def on_epoch(e: Epoch, sim: PlanSim) -> None:
        for c in given:
            c(e, sim)
    return on_epoch


def run_profile(exp: Experiment, plans: Sequence[str], rate: RateProfile, seconds: float, profile: Profile,
                every: float = 0.5, seed: int = 0, progress: Optional[Callable[[str], None]] = None,
                on_epoch: Optional[Callable[[Epoch, PlanSim], None]] = None,
                window: int = 600, adaptive: Optional[Adaptive] = None) -> tuple[list[dict], list[dict]]:
    """Every plan under a rate that changes over time, epoch by epoch (``on_epoch(epoch, sim)`` after
    each), and with ``adaptive`` the adaptive run too (see the module doc).

    Returns (timeline rows: one per epoch and plan; summary rows: one per plan, with the compiler's
    choice at the profile's mean and peak rates marked; the adaptive run's with its ``switches``).
    """
    analysis, space = plan_space(exp.policy, exp.nodes)
    sc = exp.workload(0.0, seconds, seed=seed, profile=rate)
    mean, peak = rate.mean(seconds), rate.peak(seconds)
    chosen = {}
    policy = load_policy(exp.policy)
    for what, r in (("mean", mean), ("peak", peak)):
        if r > 0:
            trace = exp.workload(r, trace_seconds(r, window, timeout=exp.timeout), seed=seed + 1).tasks
            comp = compile_policy(policy, rate=r, trace=trace, nodes=exp.nodes, executors=exp.executors,
                                  queue=exp.queue, profile=profile, measure=False, limit=exp.limit, seed=seed,
                                  window=window, workers=1)
            chosen[what] = comp.choice.estimate.plan.name

    def start(plan_name: str, lowered: LoweredPlan) -> PlanSim:
        return _start(exp, space[plan_name], lowered, analysis, sc, rate, profile, seed)

    timeline, totals = [], []
    for name in plans:
        lowered = lower(space[name], analysis, profile, exp.nodes)
        why = periodic_overload(lowered)
        if why:
            totals.append({"plan": name, "cannot_run": why})
            continue
        t0 = time.perf_counter()
        rows, total = _run(name, start(name, lowered), every, on_epoch, t0)
        timeline += rows
        totals.append({**total, "chosen_at_mean": chosen.get("mean") == name,
                       "chosen_at_peak": chosen.get("peak") == name})
        if progress:
            progress(name)
    if adaptive is not None:
        t0 = time.perf_counter()
        run = adaptive_run(exp, adaptive, sc, rate, profile, seed)
        rows, total = _run("adaptive", run.sim, every, _both(run.on_epoch, on_epoch), t0)
        timeline += rows
        totals.append({**total, "chosen_at_mean": False, "chosen_at_peak": False,
                       "started_with": run.history[0].from_plan if run.history else run.sim.plan.name,
                       "switches": [x.as_dict() for x in run.history], "evaluations": len(run.evaluations)})
        if progress:
            progress("adaptive")
    return timeline, totals


# ------------------------------------------------------------------- figures

def plot_sweep(rows: Sequence[dict], out_dir: Path, capacity: float, title: str = "") -> list[Path]:
    """Goodput, JFI and competitive ratio against the rate (solid: simulated, dashed: estimated), per plan."""
    plt = pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    names = list(dict.fromkeys(r["plan"] for r in rows))
    series = {n: sorted((r for r in rows if r["plan"] == n), key=lambda r: r["rate"]) for n in names}
    paths = []
    small = {"fontsize": 6 if len(names) > 4 else 8}

    for key, ylabel, fname in (("goodput", "goodput (tasks/s)", "goodput_vs_rate.png"),
                               ("jfi", "Jain's fairness index", "jfi_vs_rate.png")):
        fig, ax = plt.subplots(figsize=(6, 4))
        for n, rs in series.items():
            ax.plot([r["rate"] for r in rs], [r[key] for r in rs], "o-", label=n)
        if key == "goodput":
            ax.plot([0, max(r["rate"] for r in rows)], [capacity] * 2, ":", color="gray", label="execution bound")
        ax.set(xlabel="arrival rate (tasks/s)", ylabel=ylabel, title=title)
        ax.legend(**small)
        save(fig, out_dir / fname, paths)
    for key, est, ylabel, fname in (("goodput", "goodput_est", "goodput (tasks/s)", "goodput_estimated_vs_simulated.png"),
                                    ("cr_sim", "cr_est", "competitive ratio", "competitive_ratio_vs_rate.png")):
        fig, ax = plt.subplots(figsize=(6, 4))
        for i, (n, rs) in enumerate(series.items()):
            color = f"C{i % 10}"
            xs = [r["rate"] for r in rs]
            ax.plot(xs, [r[key] for r in rs], "o-", color=color, label=f"{n} (simulated)")
            ax.plot(xs, [r[est] for r in rs], "--", color=color, label=f"{n} (estimated)")
        ax.set(xlabel="arrival rate (tasks/s)", ylabel=ylabel, title=title)
        ax.legend(fontsize=5 if len(names) > 3 else 7)
        save(fig, out_dir / fname, paths)
    return paths


def plot_timeline(timeline: Sequence[dict], out_dir: Path, title: str = "",
                  cr_label: str = "competitive ratio") -> Path:
    """Offered rate and goodput, JFI and competitive ratio over time, per plan; with an adaptive run, the
    plan it had in force over time too (a panel below). ``cr_label``: what the ratio panel shows (on
    Ray, the compiler's estimate for the plan in force: no replay measures it there)."""
    plt = pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    names = list(dict.fromkeys(r["plan"] for r in timeline))
    adaptive = [r for r in timeline if r["plan"] == "adaptive"]
    fig, axes = plt.subplots(4 if adaptive else 3, 1, figsize=(7, 9.5 if adaptive else 7.5), sharex=True)
    first = [r for r in timeline if r["plan"] == names[0]] if names else []
    axes[0].plot([r["start"] for r in first], [r["offered"] for r in first], "k:", label="offered")
    for n in names:
        rs = [r for r in timeline if r["plan"] == n]
        xs = [r["start"] for r in rs]
        style = {"color": "black", "linewidth": 2} if n == "adaptive" else {}
        axes[0].plot(xs, [r["goodput"] for r in rs], label=n, **style)
        axes[1].plot(xs, [r["jfi"] for r in rs], label=n, **style)
        axes[2].plot(xs, [r["cr"] for r in rs], label=n, **style)
    axes[0].set(ylabel="tasks/s", title=title)
    axes[1].set(ylabel="Jain's index")
    axes[2].set(ylabel=cr_label, xlabel="" if adaptive else "time (s)")
    axes[0].legend(fontsize=6 if len(names) > 4 else 8)
    if adaptive:
        in_force = list(dict.fromkeys(r["in_force"] for r in adaptive))
        axes[3].step([r["start"] for r in adaptive], [in_force.index(r["in_force"]) for r in adaptive], where="post",
                     color="black")
        axes[3].set_yticks(range(len(in_force)), in_force, fontsize=7)
        axes[3].set(ylabel="adaptive: plan", xlabel="time (s)")
    return save(fig, out_dir / "timeline.png")
