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

**Where an adaptive run plugs in.** A time-varying run advances each plan's
simulation an epoch at a time (:func:`~ray_adaptive.sim.timeline.run_epochs`)
and hands every epoch's figures to :func:`run_profile`'s ``on_epoch``
callback, with the running simulation. A controller deciding "keep, or
switch to plan P" belongs there: it reads the epoch (the monitor's window),
and a switch replaces the simulation of the plan in force by one of P that
takes over its pending tasks, State and running set -- the epochs carry the
name of the plan in force, so the timeline and its figure show switches as
they are.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from ray_adaptive.compiler import Profile, compile_policy, lower
from ray_adaptive.compiler.estimates import busy_level, effective_parallelism, estimate_cost
from ray_adaptive.dsl import load_policy
from ray_adaptive.experiments.sweep import choice_agreement, plan_space, sweep, trace_seconds
from ray_adaptive.experiments.workload import Experiment
from ray_adaptive.sim.plan_sim import PlanSim, periodic_overload
from ray_adaptive.sim.timeline import Epoch, run_epochs
from ray_adaptive.workload.rates import RateProfile, parse_profile
from ray_adaptive.workload.scenario import load_scenario
from ray_adaptive.workload.spec import WorkloadSpec, load_workload_spec, parse_tenants

__all__ = ["build_experiment", "parse_rates", "resolve_plans", "run_sweep", "run_profile", "format_choices",
           "plot_sweep", "plot_timeline"]

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
    load_policy(policy)  # (an unknown policy fails here, before any work)
    spec: Optional[WorkloadSpec] = None
    trace: tuple = ()
    for given in (tenants, workload):
        if given is None:
            continue
        if given.endswith(".json") and given is workload and _is_scenario(given):
            trace = load_scenario(given).tasks  # a scenario file's tasks: a trace
        elif given.endswith(".json"):
            spec = load_workload_spec(given)
        elif given.endswith((".csv", ".parquet", ".pq")):
            from ray_adaptive.workload.trace import read_trace

            trace = read_trace(given)
        elif given is tenants:
            spec = parse_tenants(given)
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
    profile (``ramp:0=100,10=900``); default: 40% to 160% of the execution bound."""
    if not text:
        return [round(f * capacity, 1) for f in DEFAULT_FRACTIONS]
    if ":" in text:
        return parse_profile(text)
    out = []
    for part in [x.strip() for x in text.split(",") if x.strip()]:
        try:
            out.append(round(float(part[:-1]) / 100 * capacity, 1) if part.endswith("%") else float(part))
        except ValueError:
            raise ValueError(f"--rates must be comma-separated numbers (tasks/s), percentages of the execution bound "
                             f"(50%), or a rate profile (ramp:0=100,10=900); found {part!r}") from None
    if not out or any(not r > 0 for r in out):
        raise ValueError(f"--rates must be positive, found {text!r}")
    return out


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


def run_profile(exp: Experiment, plans: Sequence[str], rate: RateProfile, seconds: float, profile: Profile,
                every: float = 0.5, seed: int = 0, progress: Optional[Callable[[str], None]] = None,
                on_epoch: Optional[Callable[[Epoch, PlanSim], None]] = None,
                window: int = 600) -> tuple[list[dict], list[dict]]:
    """Every plan under a rate that changes over time, epoch by epoch (see the module doc for ``on_epoch``).

    Returns (timeline rows: one per epoch and plan; summary rows: one per plan, with the compiler's
    choice at the profile's mean and peak rates marked).
    """
    analysis, space = plan_space(exp.policy, exp.nodes)
    sc = exp.workload(0.0, seconds, seed=seed, profile=rate)
    mean, peak = rate.mean(seconds), rate.peak(seconds)
    chosen = {}
    policy = load_policy(exp.policy)
    for what, r in (("mean", mean), ("peak", peak)):
        if r > 0:
            trace = exp.workload(r, trace_seconds(r, window), seed=seed + 1).tasks
            comp = compile_policy(policy, rate=r, trace=trace, nodes=exp.nodes, executors=exp.executors,
                                  queue=exp.queue, profile=profile, measure=False, limit=exp.limit, seed=seed,
                                  window=window, workers=1)
            chosen[what] = comp.choice.estimate.plan.name
    timeline, totals = [], []
    for name in plans:
        plan = space[name]
        lowered = lower(plan, analysis, profile, exp.nodes)
        why = periodic_overload(lowered)
        if why:
            totals.append({"plan": name, "cannot_run": why})
            continue
        est = estimate_cost(plan, analysis, profile, exp.nodes, effective_parallelism(plan, sc, exp.nodes))
        t0 = time.perf_counter()
        sim = PlanSim(lowered, sc, seed=seed, prefill=busy_level(rate.at(0.0), est.throughput, exp.capacity),
                      cr_every=2)
        epochs = run_epochs(sim, every, on_epoch=on_epoch)
        timeline += [{**e.as_dict(), "plan": name} for e in epochs]
        m = sim.result().metrics()
        totals.append({"plan": name, "architecture": plan.architecture.value, "goodput": m.goodput, "jfi": m.jfi,
                       "cr_sim": m.cr["mean"], "offered": m.offered, "dropped": m.dropped,
                       "chosen_at_mean": chosen.get("mean") == name, "chosen_at_peak": chosen.get("peak") == name,
                       "events": sim.events, "sim_s": round(time.perf_counter() - t0, 3)})
        if progress:
            progress(name)
    return timeline, totals


# ------------------------------------------------------------------- figures

def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_sweep(rows: Sequence[dict], out_dir: Path, capacity: float, title: str = "") -> list[Path]:
    """Goodput, JFI and competitive ratio against the rate (solid: simulated, dashed: estimated), per plan."""
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    names = list(dict.fromkeys(r["plan"] for r in rows))
    series = {n: sorted((r for r in rows if r["plan"] == n), key=lambda r: r["rate"]) for n in names}
    paths = []
    small = {"fontsize": 6 if len(names) > 4 else 8}

    def save(fig, name):
        p = out_dir / name
        fig.tight_layout()
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)

    for key, ylabel, fname in (("goodput", "goodput (tasks/s)", "goodput_vs_rate.png"),
                               ("jfi", "Jain's fairness index", "jfi_vs_rate.png")):
        fig, ax = plt.subplots(figsize=(6, 4))
        for n, rs in series.items():
            ax.plot([r["rate"] for r in rs], [r[key] for r in rs], "o-", label=n)
        if key == "goodput":
            ax.plot([0, max(r["rate"] for r in rows)], [capacity] * 2, ":", color="gray", label="execution bound")
        ax.set(xlabel="arrival rate (tasks/s)", ylabel=ylabel, title=title)
        ax.legend(**small)
        save(fig, fname)
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
        save(fig, fname)
    return paths


def plot_timeline(timeline: Sequence[dict], out_dir: Path, title: str = "") -> Path:
    """Offered rate and goodput, JFI and competitive ratio over time, per plan."""
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    names = list(dict.fromkeys(r["plan"] for r in timeline))
    fig, axes = plt.subplots(3, 1, figsize=(7, 7.5), sharex=True)
    first = [r for r in timeline if r["plan"] == names[0]] if names else []
    axes[0].plot([r["start"] for r in first], [r["offered"] for r in first], "k:", label="offered")
    for n in names:
        rs = [r for r in timeline if r["plan"] == n]
        xs = [r["start"] for r in rs]
        axes[0].plot(xs, [r["goodput"] for r in rs], label=n)
        axes[1].plot(xs, [r["jfi"] for r in rs], label=n)
        axes[2].plot(xs, [r["cr"] for r in rs], label=n)
    axes[0].set(ylabel="tasks/s", title=title)
    axes[1].set(ylabel="Jain's index")
    axes[2].set(ylabel="competitive ratio", xlabel="time (s)")
    axes[0].legend(fontsize=6 if len(names) > 4 else 8)
    path = out_dir / "timeline.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
