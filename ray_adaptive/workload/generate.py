"""Synthetic workloads: scenarios (nodes and task specs) built directly.

* :func:`multi_tenant` -- Poisson tenants with rates (the replay demo's workload);
* :func:`tenant_workload` -- :class:`Tenant` specs: Poisson or bursty arrivals,
  rate ratios, duration distributions, clients (submitters);
* :func:`paper_workload` -- the HotNets'25 experiment at a given total rate;
* :func:`policy_workload` -- a tenant workload with the fields a policy declares.

Each returns a :class:`~ray_adaptive.workload.scenario.Scenario`, well
formed by construction (a 1,000-node workload has hundreds of thousands of
tasks: it is not checked as a scenario file is); its file form is
:func:`~ray_adaptive.workload.scenario.scenario_to_dict`'s.

Rates may change over time (steps, ramps, a diurnal sine, bursts): give a
tenant, or the whole workload, a :class:`~ray_adaptive.workload.rates.RateProfile`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from ray_adaptive.workload.rates import RateProfile
from ray_adaptive.workload.scenario import Scenario
from ray_adaptive.workload.specs import NodeSpec, TaskSpec


def _nodes(nodes: int, executors: int, queue: int) -> tuple[NodeSpec, ...]:
    return tuple(NodeSpec(f"n{i}", executors, queue) for i in range(nodes))


def _timeout(timeout: Optional[float]) -> float:
    """A task's timeout: None means none (never dropped)."""
    if timeout is None:
        return math.inf
    if not timeout >= 0:
        raise ValueError(f"timeout must be >= 0 seconds (None for none), found {timeout}")
    return float(timeout)


def multi_tenant(
    rates: dict[str, float],
    seconds: float,
    nodes: int,
    duration: float = 0.02,
    timeout: Optional[float] = 1.0,
    resource_vecs: Optional[dict[str, list[float]]] = None,
    executors: int = 1,
    queue: int = 2,
    seed: int = 0,
) -> Scenario:
    """Each tenant submits Poisson arrivals at its rate (tasks/s) to ``nodes`` nodes.

    Task fields are ``tenant`` and ``resource_vec`` (the DRF-LB policies' Task).

    Example:
        >>> sc = multi_tenant({"a": 10, "b": 30}, seconds=1.0, nodes=2, seed=1)
        >>> len(sc.nodes), sorted({t.fields["tenant"] for t in sc.tasks})
        (2, ['a', 'b'])
    """
    for name, rate in rates.items():
        if rate <= 0:
            raise ValueError(f"rate of tenant {name!r} must be > 0, found {rate}")
    rng = np.random.default_rng(seed)
    vecs = resource_vecs or {}
    arrivals = []
    for tenant, rate in rates.items():
        t = 0.0
        while True:
            t += rng.exponential(1.0 / rate)
            if t >= seconds:
                break
            arrivals.append((round(t, 6), tenant))
    arrivals.sort()
    duration, limit = float(duration), _timeout(timeout)
    tasks = tuple(TaskSpec(f"t{i}", t, duration, limit,
                           {"tenant": tenant, "resource_vec": list(vecs.get(tenant, [0.1, 0.2, 0.1]))})
                  for i, (t, tenant) in enumerate(arrivals))
    return Scenario(_nodes(nodes, executors, queue), tasks)


# ------------------------------------------------------------ tenant workloads

#: The paper's task: 12 single-executor nodes finish ~510 tasks/s, so a task takes 12 / 510 s.
PAPER_DURATION = 12 / 510.0
DURATIONS = ("fixed", "exponential", "lognormal")
ARRIVALS = ("poisson", "bursty")


@dataclass(frozen=True)
class Tenant:
    """One tenant of a synthetic workload.

    ``rate``: tasks/s. ``arrivals``: ``poisson``, or ``bursty`` (a Poisson
    process of bursts, each of a geometric number of tasks with mean
    ``burst`` arriving ~0.5 ms apart; same mean rate). ``duration``: mean
    task duration (s), drawn per ``durations`` (``fixed``, ``exponential``,
    or ``lognormal`` with shape ``sigma``). ``clients``: how many clients
    submit its tasks (each task picks one at random); None: proportional to
    the rate (see :func:`tenant_workload`). ``resource_vec``: the DRF
    resource vector of its tasks. ``fields``: values of other Task fields
    its tasks carry (a weighted policy's ``weight``), as (name, value) pairs.
    ``profile``: its rate over time is ``rate x profile.at(t)``
    (:mod:`ray_adaptive.workload.rates`; None: ``rate`` throughout).
    """

    name: str
    rate: float
    arrivals: str = "poisson"
    burst: float = 8.0
    duration: float = PAPER_DURATION
    durations: str = "fixed"
    sigma: float = 1.0
    clients: Optional[int] = None
    resource_vec: tuple = (0.1, 0.2, 0.1)
    fields: tuple = ()
    profile: Optional[RateProfile] = None

    def __post_init__(self):
        if not self.name or "/" in self.name:
            raise ValueError(f"tenant name must be non-empty and without '/', found {self.name!r}")
        if not (self.rate > 0):
            raise ValueError(f"rate of tenant {self.name!r} must be > 0 tasks/s, found {self.rate}")
        if self.arrivals not in ARRIVALS:
            raise ValueError(f"arrivals of tenant {self.name!r} must be one of {', '.join(ARRIVALS)}, found {self.arrivals!r}")
        if self.durations not in DURATIONS:
            raise ValueError(f"durations of tenant {self.name!r} must be one of {', '.join(DURATIONS)}, found {self.durations!r}")
        if not (self.duration > 0) or not (self.burst >= 1):
            raise ValueError(f"tenant {self.name!r}: duration must be > 0 and burst >= 1")
        if isinstance(self.fields, dict):
            object.__setattr__(self, "fields", tuple(sorted(self.fields.items())))
        if any(not (isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)) for p in self.fields):
            raise ValueError(f"tenant {self.name!r}: fields must be (name, value) pairs or a dict, found {self.fields!r}")
        if self.clients is not None and self.clients < 1:
            raise ValueError(f"tenant {self.name!r}: clients must be >= 1, found {self.clients}")


def _arrival_times(t: Tenant, seconds: float, rng: np.random.Generator) -> np.ndarray:
    if t.profile is not None:
        return _thinned(t, seconds, rng)
    if t.arrivals == "poisson":
        n = rng.poisson(t.rate * seconds)
        return np.sort(rng.uniform(0.0, seconds, n))
    bursts = rng.poisson(t.rate / t.burst * seconds)
    starts = rng.uniform(0.0, seconds, bursts)
    sizes = rng.geometric(1.0 / t.burst, bursts)
    out = [s + np.cumsum(rng.exponential(0.0005, k)) - 0.0005 for s, k in zip(starts, sizes)]
    times = np.concatenate(out) if out else np.zeros(0)
    # (a burst starting in the first 0.5 ms may put its first task a hair before 0: at 0 instead)
    return np.sort(np.maximum(times[times < seconds], 0.0))


def _thinned(t: Tenant, seconds: float, rng: np.random.Generator) -> np.ndarray:
    """Arrivals at ``t.rate x t.profile.at(time)``: a process at the peak rate, each arrival (or burst)
    kept with probability rate / peak (thinning)."""
    peak = t.rate * t.profile.peak(seconds)
    if not peak > 0:
        return np.zeros(0)
    flat = dataclasses.replace(t, rate=peak, profile=None)
    if t.arrivals == "poisson":
        times = _arrival_times(flat, seconds, rng)
        return times[rng.uniform(0.0, peak, times.size) < t.rate * t.profile.at(times)]
    bursts = rng.poisson(peak / t.burst * seconds)
    starts = np.sort(rng.uniform(0.0, seconds, bursts))
    starts = starts[rng.uniform(0.0, peak, starts.size) < t.rate * t.profile.at(starts)]
    sizes = rng.geometric(1.0 / t.burst, starts.size)
    out = [s + np.cumsum(rng.exponential(0.0005, k)) - 0.0005 for s, k in zip(starts, sizes)]
    times = np.concatenate(out) if out else np.zeros(0)
    return np.sort(np.maximum(times[times < seconds], 0.0))


def _durations(t: Tenant, n: int, rng: np.random.Generator) -> np.ndarray:
    if t.durations == "fixed":
        return np.full(n, t.duration)
    if t.durations == "exponential":
        return rng.exponential(t.duration, n)
    mu = np.log(t.duration) - t.sigma ** 2 / 2  # mean = duration
    return rng.lognormal(mu, t.sigma, n)


def tenant_workload(
    tenants: Sequence[Tenant],
    seconds: float,
    nodes: int = 12,
    executors: int = 1,
    queue: int = 2,
    timeout: Optional[float] = 1.0,
    client_rate: Optional[float] = None,
    seed: int = 0,
    profile: Optional[RateProfile] = None,
) -> Scenario:
    """``tenants`` submitting for ``seconds`` to ``nodes`` nodes.

    ``profile``: every tenant without one of its own follows it (its rate
    over time is ``rate x profile.at(t)``).

    Each task records its ``submitter`` ("tenant/client"). A tenant without a
    fixed ``clients`` count runs ``max(1, round(rate / client_rate))``
    clients, ``client_rate`` defaulting to the smallest tenant rate: a tenant
    sending 3x the others runs 3x the clients, as when more front-ends send
    more traffic. (Under a decentralized plan each client submits to its own
    home scheduler, which is what lets a heavy tenant crowd out light ones.)
    Task fields are ``tenant`` and ``resource_vec``. Deterministic for a seed.

    Example:
        >>> sc = tenant_workload([Tenant("a", 10), Tenant("g", 30)], seconds=2.0, nodes=2, seed=1)
        >>> sorted({t.submitter for t in sc.tasks})
        ['a/0', 'g/0', 'g/1', 'g/2']
    """
    rows = _rows(tenants, seconds, nodes, client_rate, seed, profile)
    limit = _timeout(timeout)
    tasks = tuple(TaskSpec(f"t{i}", a, round(d, 7), limit, {"tenant": name, "resource_vec": list(vec), **dict(extra)},
                           {}, f"{name}/{c}")
                  for i, (a, name, d, c, vec, extra) in enumerate(rows))
    return Scenario(_nodes(nodes, executors, queue), tasks)


def _rows(tenants: Sequence[Tenant], seconds: float, nodes: int, client_rate: Optional[float], seed: int,
          profile: Optional[RateProfile]) -> list[tuple]:
    """Every task of ``tenants`` as (arrival, tenant, duration, client, resource vector, fields), in
    arrival order (see :func:`tenant_workload`)."""
    if not tenants:
        raise ValueError("a workload needs at least one tenant")
    if len({t.name for t in tenants}) != len(tenants):
        raise ValueError(f"tenant names must be unique, found {[t.name for t in tenants]}")
    if not (seconds > 0) or nodes < 1:
        raise ValueError(f"seconds must be > 0 and nodes >= 1, found {seconds} and {nodes}")
    base = client_rate or min(t.rate for t in tenants)
    if profile is not None:
        tenants = [t if t.profile is not None else dataclasses.replace(t, profile=profile) for t in tenants]
    rng = np.random.default_rng(seed)
    rows = []
    for t in tenants:
        times = _arrival_times(t, seconds, rng)
        durations = _durations(t, len(times), rng)
        n_clients = t.clients or max(1, int(round(t.rate / base)))
        clients = rng.integers(0, n_clients, len(times))
        rows += [(round(float(a), 6), t.name, float(d), int(c), t.resource_vec, t.fields)
                 for a, d, c in zip(times, durations, clients)]
    rows.sort(key=lambda r: (r[0], r[1], r[3]))
    return rows


def paper_tenants(rate: float, greedy: float = 3.0, others: int = 2) -> list[Tenant]:
    """The paper's mix at total ``rate``: ``others`` tenants at r and one "greedy" at ``greedy`` x r."""
    r = rate / (others + greedy)
    return [*(Tenant(chr(ord("a") + i), r) for i in range(others)), Tenant("greedy", greedy * r)]


def paper_workload(rate: float, seconds: float, seed: int = 0, **kwargs) -> Scenario:
    """The paper's experiment (Section 2): 3 tenants, one greedy at 3x each other, 12 single-executor nodes.

    Tasks take 12 / 510 s (so the nodes' execution bound is ~510 tasks/s) and
    are dropped when not started within 1 s.
    """
    return tenant_workload(paper_tenants(rate), seconds, seed=seed, **kwargs)


# ---------------------------------------------------- any policy's workload

def synthetic_value(t, name: str, rng: np.random.Generator, index: int):
    """A value of DSL type ``t`` for a field named ``name`` (deterministic for the rng).

    Strings cycle through three values (``f"{name}{i % 3}"``), so a task field
    and a node field of the same name (zones) match one node in three.
    """
    k = t.kind
    if k == "string":
        return f"{name}{index % 3}"
    if k == "int":
        return int(rng.integers(0, 10))
    if k == "float":
        return round(float(rng.uniform(0.5, 2.0)), 4)
    if k == "bool":
        return bool(rng.random() < 0.5)
    if k == "vec":
        return [1.0, 1.0, 1.0] if t.elem.kind == "float" else [1, 1, 1]
    return {}


def policy_workload(policy, tenants: Sequence[Tenant], seconds: float, nodes: int = 12, executors: int = 1,
                    queue: int = 2, timeout: Optional[float] = 1.0, seed: int = 0,
                    profile: Optional[RateProfile] = None) -> Scenario:
    """:func:`tenant_workload` with the fields ``policy`` declares.

    ``tenant`` (string) and ``resource_vec`` (vec<float>) come from the
    tenants, and so do the fields a tenant gives (:attr:`Tenant.fields`); any
    other Task or Node field gets :func:`synthetic_value`.

    Example:
        >>> from ray_adaptive.dsl import load_policy
        >>> sc = policy_workload(load_policy("weighted_fair"), [Tenant("a", 10, fields={"weight": 2})], 1.0, nodes=2)
        >>> sorted(sc.tasks[0].fields), sc.tasks[0].fields["weight"]   # (cost: synthetic; weight: a float)
        (['cost', 'tenant', 'weight'], 2.0)
    """
    rows = _rows(tenants, seconds, nodes, None, seed, profile)
    limit = _timeout(timeout)
    rng = np.random.default_rng([seed, 7])
    tasks = []
    for i, (a, name, d, c, vec, extra) in enumerate(rows):
        given = {"tenant": name, "resource_vec": list(vec), **dict(extra)}
        fields = {}
        for f in policy.task_fields:
            if f.name in given and ((f.name, f.type.kind) in (("tenant", "string"), ("resource_vec", "vec"))
                                    or f.name not in ("tenant", "resource_vec")):
                v = given[f.name]  # (a number written 1 where the field is a float: 1.0)
                fields[f.name] = float(v) if f.type.kind == "float" and isinstance(v, int) and not isinstance(v, bool) else v
            else:
                fields[f.name] = synthetic_value(f.type, f.name, rng, i)
        tasks.append(TaskSpec(f"t{i}", a, round(d, 7), limit, fields, {}, f"{name}/{c}"))
    cluster = tuple(dataclasses.replace(n, fields={f.name: synthetic_value(f.type, f.name, rng, i) for f in policy.node_fields})
                    for i, n in enumerate(_nodes(nodes, executors, queue)))
    return Scenario(cluster, tuple(tasks))
