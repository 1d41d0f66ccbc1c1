"""The replay demo (``ray-adaptive demo --replay``): DRF-LB replayed on a shipped scenario.

Three tenants share 4 single-executor nodes; "greedy" submits 3x the rate of
each other tenant and the cluster is ~25% overloaded, with a 1 s timeout.
Every ``every`` seconds the demo prints each tenant's dominant share (DRF's
``alloc`` / capacity) and on-time tasks served under ``drf_lb``; then it
compares policies by on-time service per tenant and Jain's fairness index
over service ratios (served / max-min fair share).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from importlib import resources

import click
import numpy as np

from ray_adaptive.dsl import load_policy
from ray_adaptive.sim import Replay
from ray_adaptive.workload import Scenario, load_scenario
from ray_adaptive.sim.metrics import jain_index, service_ratios

SCENARIO = "drf_3tenants"
COMPARE = ("drf_lb", "drf_lb_paper", "fifo", "least_loaded")


def _scenario() -> Scenario:
    return load_scenario(str(resources.files("ray_adaptive").joinpath("scenarios", f"{SCENARIO}.json")))


def _for_policy(scenario: Scenario, policy) -> Scenario:
    """Keep only the task fields ``policy`` declares (fifo has none)."""
    keep = {f.name for f in policy.task_fields}
    tasks = tuple(dataclasses.replace(t, fields={k: v for k, v in t.fields.items() if k in keep}) for t in scenario.tasks)
    return dataclasses.replace(scenario, tasks=tasks)


def run_demo(policy_name: str = "drf_lb", every: float = 0.5) -> None:
    scenario = _scenario()
    tenant = {t.id: t.fields["tenant"] for t in scenario.tasks}
    tenants = sorted(set(tenant.values()))
    span = max(t.arrival for t in scenario.tasks)
    capacity = sum(n.executors for n in scenario.nodes) / scenario.tasks[0].duration  # tasks/s
    demand = Counter(tenant.values())
    click.echo(
        f"Scenario {SCENARIO}: {len(scenario.tasks)} tasks over {span:.1f} s from tenants "
        + ", ".join(f"{k} ({demand[k] / span:.0f}/s)" for k in tenants)
        + f"; {len(scenario.nodes)} nodes run {capacity:.0f} tasks/s."
    )

    served_before: Counter = Counter()
    policy = load_policy(policy_name)

    def observe(t: float, run: Replay) -> None:
        if t > span + 1e-9:
            return
        alloc, cap = run.state.get("alloc", {}), run.state.get("capacity", np.ones(1))
        served = Counter(tenant[x.id] for x in run.tasks if x.on_time)
        window = {k: served[k] - served_before[k] for k in tenants}
        served_before.update(window)
        cells = "  ".join(f"{float(np.max(np.asarray(alloc.get(k, 0.0)) / cap)):6.2f} /{window[k]:4d}" for k in tenants)
        click.echo(f"{t:7.2f}  {cells}")

    click.echo(f"\n{policy_name}: each tenant's dominant share / tasks served on time in the last {every:g} s")
    click.echo("time(s)  " + "  ".join(f"{k:>12}" for k in tenants))
    Replay(policy, _for_policy(scenario, policy)).run(every=every, observe=observe)

    click.echo("\npolicy          " + "  ".join(f"{k + ' served':>16}" for k in tenants) + "   Jain's index")
    for name in dict.fromkeys((policy_name, *COMPARE)):
        p = load_policy(name)
        result = Replay(p, _for_policy(scenario, p)).run()
        served = Counter(tenant[x.id] for x in result.tasks if x.on_time)
        ratios = service_ratios({k: served[k] / span for k in tenants}, {k: demand[k] / span for k in tenants}, capacity)
        cells = "  ".join(f"{served[k]:>7d} of {demand[k]:<5d}" for k in tenants)
        click.echo(f"{name:<15} {cells}   {jain_index(list(ratios.values())):.3f}")
