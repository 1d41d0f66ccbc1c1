"""The paper's experiment (HotNets'25, Section 2 and 6) as one function: ``ray-adaptive reproduce``.

DRF-LB; 3 tenants of equal priority, one "greedy" submitting 3x the rate of
each other (from 3x the clients); 12 nodes with one FIFO executor and a
queue of 2; tasks of 12/510 s (the execution bound is ~510 tasks/s)
dropped when no scheduler picks them within 1 s. For every arrival rate of
the sweep:

* the simulator runs the paper's three implementations -- centralized,
  decentralized (State synced through a shared store every 100 ms) and
  hybrid -- and measures goodput, Jain's index over the tenants' service
  ratios, and the competitive ratio of their decisions;
* the compiler compiles DRF-LB for that rate (on a window of the same
  workload) and its choice among *all* plans is simulated too.

``reproduce --adaptive`` (:func:`reproduce_adaptive`) runs the same workload
on a rate that changes -- low, above the crossover, far above, low again --
under the adaptive controller and under each of the three plans, per phase;
``reproduce --adaptive --scale-out`` (:func:`~ray_adaptive.experiments.scale_out.reproduce_scale_out`)
on a cluster that grows and shrinks (12 -> 200 -> 12 nodes) with the rate
following its size, adaptive against every static plan.

Out come a CSV of every run, four PNG figures (goodput vs rate, JFI vs rate
-- the paper's Figure 2; estimated vs simulated goodput, competitive ratio
vs JFI -- Figure 5), and Table 1 computed from the data next to the
compiler's choice per rate.

**Within the limit** (the simulator's verdict): a run's competitive ratio,
measured over the whole run, is at most the policy's limit, and its JFI is
at least :func:`jfi_floor` (the lowest JFI when every tenant gets within
1 +- (1 - 1/limit) of its fair share). The competitive ratio is the quantity the limit
bounds; JFI is the outcome. They part ways just above saturation: there a
decentralized plan's decisions already favour the heavy tenant (ratio ~2),
but a light tenant loses service only in proportion to how far its demand
exceeds what its scheduler wins, so JFI falls later and gradually.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from ray_adaptive.control import Settings
from ray_adaptive.compiler import Profile, analyze
from ray_adaptive.compiler.pipeline import measured_profile, workload_window
from ray_adaptive.dsl import load_policy
from ray_adaptive.experiments.figures import pyplot, save
from ray_adaptive.experiments.sweep import (PAPER_PLANS, agreement, best_plans, choice_agreement, jfi_floor,
                                            sweep as _sweep)
from ray_adaptive.experiments.workload import Experiment
from ray_adaptive.workload.generate import PAPER_DURATION
from ray_adaptive.workload.limits import check_tasks

__all__ = ["Experiment", "PAPER", "WORKLOADS", "PAPER_PLANS", "sweep", "table1", "agreement", "choice_agreement",
           "best_plans", "jfi_floor", "reproduce", "DEFAULT_RATES", "QUICK_RATES", "ADAPTIVE_PHASES",
           "reproduce_adaptive", "phase_settings"]

DEFAULT_RATES = (150, 300, 380, 420, 460, 500, 540, 620, 750, 900)
#: The adaptive run's phases, x the execution bound (~510 tasks/s): low (a centralized plan carries it
#: within the limit), above the crossover (the centralized plans saturate near 450; a decentralized one
#: carries it, its ratio still within 1.2), far above (only the hybrid stays within the limit), low again.
#: Per the compiler's estimates on this workload (printed by the command: the table's choice per phase).
ADAPTIVE_PHASES = (0.4, 1.0, 1.6, 0.4)
QUICK_RATES = (200, 350, 430, 490, 650, 850)

PAPER = Experiment()

#: Workloads beyond the paper's on which the compiler's choice is checked against the simulator's best plan.
WORKLOADS = (
    PAPER,
    Experiment("four-tenants-8-nodes", shares=(("a", 1.0), ("b", 1.0), ("c", 1.0), ("heavy", 5.0)), nodes=8),
    Experiment("bursty-2-tenants-16-nodes", shares=(("light", 1.0), ("heavy", 4.0)), nodes=16,
               arrivals="bursty", durations="exponential"),
    Experiment("lognormal-24-nodes", shares=(("a", 1.0), ("b", 2.0), ("c", 6.0)), nodes=24,
               duration=2 * PAPER_DURATION, durations="lognormal"),
    Experiment("six-tenants-16-nodes", shares=(("a", 1.0), ("b", 1.0), ("c", 1.0), ("d", 1.0), ("e", 2.0), ("f", 4.0)),
               nodes=16, duration=0.03),
)


def sweep(exp: Experiment = PAPER, rates: Sequence[float] = DEFAULT_RATES, *args, **kwargs) -> list[dict]:
    """:func:`ray_adaptive.experiments.sweep.sweep`, by default the paper's experiment at the default rates."""
    return _sweep(exp, rates, *args, **kwargs)


def _relation(values: dict[str, float], tol: float, higher_better: bool = True) -> str:
    """``D > H > C`` / ``C = D = H``: the order of the plans, equal within ``tol`` (relative)."""
    items = sorted(values.items(), key=lambda kv: -kv[1] if higher_better else kv[1])
    groups: list[list[str]] = []
    for k, v in items:
        if groups and abs(values[groups[-1][0]] - v) <= tol * max(abs(values[groups[-1][0]]), 1e-9):
            groups[-1].append(k)
        else:
            groups.append([k])
    return " > ".join(" = ".join(sorted(g)) for g in groups)


def table1(rows: Sequence[dict], gp_tol: float = 0.03, jfi_tol: float = 0.01) -> list[dict]:
    """The paper's Table 1 from the sweep: per rate band, goodput and fairness relations, the best plan(s)."""
    per_rate = []
    for rate in sorted({r["rate"] for r in rows}):
        runs = {r["paper_plan"]: r for r in rows if r["rate"] == rate and r["paper_plan"]}
        if len(runs) < 3:
            continue
        gp = _relation({k: r["goodput"] for k, r in runs.items()}, gp_tol)
        fair_rel = _relation({k: (1.0 if r["within_limit_sim"] else 0.0) for k, r in runs.items()}, 0.0)
        ok = {k: r for k, r in runs.items() if r["within_limit_sim"]} or runs
        top = max(r["goodput"] for r in ok.values())
        best = sorted(k for k, r in ok.items() if r["goodput"] >= top * (1 - gp_tol))
        label = "Any (C preferred)" if best == ["C", "D", "H"] else ", ".join(best)
        chosen = next((r["plan"] for r in rows if r["rate"] == rate and r["chosen"]), "")
        chosen_paper = next((r["paper_plan"] for r in rows if r["rate"] == rate and r["chosen_among_paper"]), "")
        per_rate.append({"rate": rate, "goodput": gp, "fairness": fair_rel, "best": label,
                         "compiler": chosen, "compiler_paper": chosen_paper})
    bands: list[dict] = []
    for row in per_rate:
        if bands and all(bands[-1][k] == row[k] for k in ("goodput", "fairness", "best")):
            bands[-1]["rates"].append(row["rate"])
            bands[-1]["compiler"].append(row["compiler"])
            bands[-1]["compiler_paper"].append(row["compiler_paper"])
        else:
            bands.append({**row, "rates": [row["rate"]], "compiler": [row["compiler"]],
                          "compiler_paper": [row["compiler_paper"]]})
    return bands


def format_table1(bands: Sequence[dict]) -> str:
    """Table 1 as text: rate band, goodput and fairness relations, best plan(s), the compiler's choices."""
    def band(b):
        lo, hi = b["rates"][0], b["rates"][-1]
        return f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"

    head = ("rate (tasks/s)", "goodput", "within limit", "best (simulated)", "compiler (C/D/H)", "compiler (all plans)")
    rows = [(band(b), b["goodput"], b["fairness"], b["best"], ", ".join(dict.fromkeys(b["compiler_paper"])),
             ", ".join(dict.fromkeys(b["compiler"]))) for b in bands]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(r) for r in rows])


# ------------------------------------------------------------------- figures

def plot(rows: Sequence[dict], out_dir: Path, exp: Experiment = PAPER) -> list[Path]:
    """The paper's Figures 2a, 2b, 5a, 5b as PNGs in ``out_dir``."""
    plt = pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    colors = {"C": "tab:blue", "D": "tab:orange", "H": "tab:green"}
    series = {k: sorted((r for r in rows if r["paper_plan"] == k), key=lambda r: r["rate"]) for k in PAPER_PLANS}
    label = {"C": "centralized", "D": "decentralized", "H": "hybrid"}
    paths = []

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for k, rs in series.items():
        ax.plot([r["rate"] for r in rs], [r["goodput"] for r in rs], "o-", color=colors[k], label=label[k])
    ax.plot([0, max(r["rate"] for r in rows)], [exp.capacity] * 2, ":", color="gray", label="execution bound")
    ax.set(xlabel="arrival rate (tasks/s)", ylabel="goodput (tasks/s)", title="Goodput (Fig. 2a)")
    ax.legend()
    save(fig, out_dir / "goodput_vs_rate.png", paths)

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for k, rs in series.items():
        ax.plot([r["rate"] for r in rs], [r["jfi"] for r in rs], "o-", color=colors[k], label=label[k])
    ax.set(xlabel="arrival rate (tasks/s)", ylabel="Jain's fairness index", title="Fairness (Fig. 2b)")
    ax.legend()
    save(fig, out_dir / "jfi_vs_rate.png", paths)

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for k, rs in series.items():
        xs = [r["rate"] for r in rs]
        ax.plot(xs, [r["goodput"] for r in rs], "o-", color=colors[k], label=f"{label[k]} (simulated)")
        ax.plot(xs, [r["goodput_est"] for r in rs], "--", color=colors[k], label=f"{label[k]} (estimated)")
    ax.set(xlabel="arrival rate (tasks/s)", ylabel="goodput (tasks/s)", title="Goodput estimation (Fig. 5a)")
    ax.legend(fontsize=7)
    save(fig, out_dir / "goodput_estimated_vs_simulated.png", paths)

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax2 = ax.twinx()
    for k, rs in series.items():
        xs = [r["rate"] for r in rs]
        ax.plot(xs, [r["jfi"] for r in rs], "o-", color=colors[k], label=f"{label[k]} JFI")
        ax2.plot(xs, [r["cr_est"] for r in rs], "--", color=colors[k], label=f"{label[k]} CR (estimated)")
    ax.set(xlabel="arrival rate (tasks/s)", ylabel="Jain's fairness index (solid)",
           title="Competitive ratio vs fairness (Fig. 5b)")
    ax2.set_ylabel("competitive ratio (dashed)")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="center left")
    save(fig, out_dir / "competitive_ratio_vs_jfi.png", paths)
    return paths


# ---------------------------------------------------------------- the command

def reproduce(out_dir: "str | Path" = "out/reproduce", quick: bool = False, rates: Optional[Sequence[float]] = None,
              seconds: Optional[float] = None, seed: int = 0, measure: bool = True, show_progress: bool = True,
              echo: Callable[[str], None] = print) -> dict:
    """Run the sweep, write ``sweep.csv`` and the figures to ``out_dir``, print Table 1; return a summary."""
    import pandas as pd

    rates = tuple(rates or (QUICK_RATES if quick else DEFAULT_RATES))
    if seconds is None:
        seconds = 1.6 if quick else 2.5
    if not 0 < seconds < math.inf:  # (0 is no run at all, not "the default")
        raise ValueError(f"seconds must be a finite number > 0, found {seconds}")
    check_tasks(sum(rates) * seconds, f"--rates {','.join(f'{r:g}' for r in rates)} over --seconds {seconds:g}",
                "lower --rates or --seconds")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    warmup = min(0.5, seconds / 4)
    profile = Profile()
    if measure:
        policy = load_policy(PAPER.policy)
        window, _ = workload_window(policy, None, 400.0, PAPER.nodes, window=100)
        profile = measured_profile(analyze(policy), window, profile)
    start = time.perf_counter()
    total = None  # the compiler's choice adds a run at some rates only
    bar = None
    if show_progress:
        from tqdm import tqdm

        bar = tqdm(total=total, desc="reproduce", unit="run", leave=False)

    def tick(what: str) -> None:
        if bar is not None:
            bar.set_postfix_str(what)
            bar.update(1)

    rows = sweep(PAPER, rates, seconds, warmup, profile=profile, seed=seed, progress=tick, window=400)
    if bar is not None:
        bar.close()
    elapsed = time.perf_counter() - start
    df = pd.DataFrame(rows)
    df.to_csv(out / "sweep.csv", index=False)
    figures = plot(rows, out)
    bands = table1(rows)
    events = int(df["events"].sum())
    echo(f"Swept {len(rates)} rates x {len(PAPER_PLANS)} plans (+ the compiler's choice) in {elapsed:.1f} s "
         f"({events:,} simulated events, {events / elapsed:,.0f} events/s)")
    echo("")
    echo("Table 1 (simulated; C = centralized, D = decentralized, H = hybrid)")
    echo(format_table1(bands))
    echo("")
    echo(f"wrote {out / 'sweep.csv'} and {', '.join(p.name for p in figures)}")
    return {"rows": rows, "bands": bands, "elapsed_s": elapsed, "events": events, "figures": figures,
            "csv": out / "sweep.csv", "profile": profile}


def phase_settings(phase_s: float) -> Settings:
    """The controller's settings for phases of ``phase_s``: the runtime's defaults at 20 s phases
    (evaluations every 2 s over 5 s, three in a row, 10 s of dwell), scaled with the phase -- so that a
    shorter run reacts within a phase, as the runtime does within a 20 s one."""
    return Settings(every_s=phase_s / 10, window_s=phase_s / 4, consecutive=3, dwell_s=phase_s / 2)


def _phase_rows(timeline: Sequence[dict], phase_s: float, rates: Sequence[float]) -> list[dict]:
    """Per run and phase: goodput and JFI (the mean of its epochs: they are of equal length), the
    competitive ratio (its decisions' mean), the plans in force."""
    rows = []
    for name in dict.fromkeys(r["plan"] for r in timeline):
        for i, rate in enumerate(rates):
            es = [r for r in timeline if r["plan"] == name and i * phase_s <= r["start"] < (i + 1) * phase_s]
            n = sum(e["decisions"] for e in es if not math.isnan(e["cr"]))
            cr = sum(e["cr"] * e["decisions"] for e in es if not math.isnan(e["cr"])) / n if n else math.nan
            rows.append({"plan": name, "phase": i + 1, "rate": round(rate, 1),
                         "goodput": round(sum(e["goodput"] for e in es) / len(es), 1),
                         "jfi": round(sum(e["jfi"] for e in es) / len(es), 4), "cr": round(cr, 4),
                         "in_force": ", ".join(dict.fromkeys(e["in_force"] for e in es))})
    return rows


def reproduce_adaptive(out_dir: "str | Path" = "out/reproduce_adaptive", quick: bool = False,
                       phase_s: Optional[float] = None, seed: int = 0, pause_s: Optional[float] = None,
                       echo: Callable[[str], None] = print) -> dict:
    """DRF-LB on the paper's tenants at :data:`ADAPTIVE_PHASES`, adaptive and under C, D and H: per phase
    goodput, JFI and competitive ratio; ``adaptive_phases.csv``, ``timeline.csv`` and ``timeline.png``."""
    import pandas as pd

    from ray_adaptive.experiments.simulate import adaptive_setup, format_switches, plot_timeline, run_profile
    from ray_adaptive.sim.adaptive import SWITCH_PAUSE_S
    from ray_adaptive.workload.rates import RateProfile

    phase_s = phase_s or (10.0 if quick else 20.0)
    if not 0 < phase_s < math.inf:
        raise ValueError(f"a phase must last a finite number of seconds > 0, found {phase_s}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rates = [f * PAPER.capacity for f in ADAPTIVE_PHASES]
    profile_ = RateProfile("steps", points=tuple((i * phase_s, r) for i, r in enumerate(rates)))
    seconds = phase_s * len(rates)
    window = 200 if quick else 400
    start = time.perf_counter()
    setup = adaptive_setup(PAPER, profile_, seconds, Profile(), window=window, seed=seed,
                           settings=phase_settings(phase_s), pause_s=SWITCH_PAUSE_S if pause_s is None else pause_s)
    echo("The compiler's choice per phase (the estimate table's): " +
         "; ".join(f"{r:.0f} tasks/s: {setup.table.at(r)[1]}" for r in rates))
    timeline, totals = run_profile(PAPER, list(PAPER_PLANS.values()), profile_, seconds, Profile(), every=0.5,
                                   seed=seed, window=window, adaptive=setup)
    rows = _phase_rows(timeline, phase_s, rates)
    busy = {t["plan"]: t.get("busy_s_per_1k") for t in totals}
    for r in rows:
        r["busy_s_per_1k_run"] = busy.get(r["plan"])
    pd.DataFrame(rows).to_csv(out / "adaptive_phases.csv", index=False)
    pd.DataFrame(timeline).to_csv(out / "timeline.csv", index=False)
    fig = plot_timeline(timeline, out, title="drf_lb: adaptive vs C, D, H")
    elapsed = time.perf_counter() - start
    echo(f"{len(rates)} phases of {phase_s:g} s, {len(totals)} runs, in {elapsed:.1f} s")
    head = ("run", "phase", "rate", "goodput", "JFI", "CR", "plan(s) in force", "busy s/1k tasks (run)")
    lines = [(r["plan"], r["phase"], f"{r['rate']:.0f}", f"{r['goodput']:.0f}", f"{r['jfi']:.3f}", f"{r['cr']:.3f}",
              r["in_force"] if r["plan"] == "adaptive" else "", r["busy_s_per_1k_run"]) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths))  # noqa: E731
    echo("\n".join([line(head), line(["-" * w for w in widths])] + [line(x) for x in lines]))
    adaptive = next(t for t in totals if t["plan"] == "adaptive")
    echo(format_switches(adaptive))
    echo(f"wrote {out / 'adaptive_phases.csv'}, {out / 'timeline.csv'} and {fig.name}")
    return {"phases": rows, "totals": totals, "timeline": timeline, "elapsed_s": elapsed, "figure": fig,
            "switches": adaptive["switches"]}
