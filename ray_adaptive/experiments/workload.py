"""An experiment's workload and cluster: tenants sharing a rate, nodes, task durations, arrivals.

:class:`Experiment` is what ``ray-adaptive reproduce`` sweeps (the paper's
three tenants, one greedy at 3x, on 12 nodes) and what ``ray-adaptive
simulate`` builds from ``--tenants`` for any policy: tenants with shares of
the total rate and, optionally, values of the policy's Task fields (a
weighted policy's ``weight``), on a cluster of identical nodes; arrivals
Poisson or bursty, at a constant total rate or following a
:class:`~ray_adaptive.workload.rates.RateProfile`.

A *trace* (:attr:`Experiment.trace`, the tasks of a trace file) stands in
for the tenants: a run at some rate replays it with its arrivals scaled to
that rate, and a rate profile retimes it (:func:`~ray_adaptive.workload.rates.retime`).

Example:
    >>> exp = Experiment(policy="weighted_fair", shares=(("a", 1.0), ("b", 1.0)),
    ...                  fields=(("a", (("weight", 1.0),)), ("b", (("weight", 3.0),))), nodes=4)
    >>> round(exp.capacity), [t.rate for t in exp.tenants(100)]
    (170, [50.0, 50.0])
    >>> sorted({(t.fields["tenant"], t.fields["weight"]) for t in exp.workload(100, 1.0).tasks})
    [('a', 1.0), ('b', 3.0)]
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from ray_adaptive.dsl import load_policy
from ray_adaptive.workload.generate import PAPER_DURATION, Tenant, policy_workload
from ray_adaptive.workload.rates import RateProfile, retime
from ray_adaptive.workload.scenario import Scenario, check_fields

__all__ = ["Experiment"]


@dataclass(frozen=True)
class Experiment:
    """A workload and cluster to sweep: tenants (name, share of the rate), nodes, durations, arrivals.

    A tenant with k times the rate runs k times the clients (a task enters a
    decentralized plan at its client's home scheduler). ``fields``: per
    tenant, values of Task fields its tasks carry, as (tenant, ((field,
    value), ...)) pairs. ``policy``: a shipped policy's name or a policy
    file. ``limit``: the competitive-ratio limit the compiler and the judge
    hold plans to (default: the policy's ``[limit=...]``).
    """

    name: str = "paper"
    policy: str = "drf_lb"
    shares: tuple[tuple[str, float], ...] = (("a", 1.0), ("b", 1.0), ("greedy", 3.0))
    nodes: int = 12
    executors: int = 1
    queue: int = 2
    duration: float = PAPER_DURATION
    durations: str = "fixed"
    arrivals: str = "poisson"
    timeout: float = 1.0
    fields: tuple = ()
    limit: Optional[float] = None
    clients: tuple = ()  # (tenant, clients) pairs: a tenant's client count, if fixed
    trace: tuple = ()  # task specs of a trace that stands in for the tenants

    def __post_init__(self):
        if not self.shares or any(not (w > 0) for _, w in self.shares):
            raise ValueError(f"an experiment needs tenants with shares > 0, found {self.shares!r}")
        if self.nodes < 1 or self.executors < 1 or self.queue < 0:
            raise ValueError(f"need nodes >= 1, executors >= 1, queue >= 0; found {self.nodes}, {self.executors}, "
                             f"{self.queue}")

    def quality_limit(self) -> Optional[float]:
        """The limit plans are held to: :attr:`limit`, else the policy's."""
        return self.limit if self.limit is not None else load_policy(self.policy).limit

    @property
    def capacity(self) -> float:
        """The nodes' execution bound (tasks/s)."""
        if self.trace:
            return self.nodes * self.executors / (sum(t.duration for t in self.trace) / len(self.trace))
        return self.nodes * self.executors / self.duration

    @property
    def trace_rate(self) -> float:
        """The trace's own arrival rate (tasks/s)."""
        span = self.trace[-1].arrival - self.trace[0].arrival
        return (len(self.trace) - 1) / span if span > 0 else float("inf")

    def tenants(self, rate: float) -> list[Tenant]:
        total = sum(w for _, w in self.shares)
        extra, clients = dict(self.fields), dict(self.clients)
        return [Tenant(n, rate * w / total, arrivals=self.arrivals, duration=self.duration, durations=self.durations,
                       fields=tuple(extra.get(n, ())), clients=clients.get(n)) for n, w in self.shares]

    def workload(self, rate: float, seconds: float, seed: int = 0,
                 profile: Optional[RateProfile] = None) -> Scenario:
        """``seconds`` of arrivals at ``rate`` tasks/s -- or, with ``profile``, at ``profile.at(t)``
        (then ``rate`` is ignored)."""
        policy = load_policy(self.policy)
        if self.trace:
            return self._from_trace(policy, rate, seconds, seed, profile)
        if profile is not None:  # the tenants' rates become their shares of the profile's total
            tenants = self.tenants(1.0)
        else:
            tenants = self.tenants(rate)
        return policy_workload(policy, tenants, seconds, self.nodes, self.executors, self.queue, self.timeout,
                               seed=seed, profile=profile)

    def _from_trace(self, policy, rate: float, seconds: float, seed: int, profile: Optional[RateProfile]) -> Scenario:
        """The trace at ``rate`` (or retimed to ``profile``), its first ``seconds``, on this cluster."""
        tasks = sorted(self.trace, key=lambda t: (t.arrival, t.id))
        t0 = tasks[0].arrival
        if profile is not None:
            tasks = retime(tasks, profile)
        else:
            scale = self.trace_rate / rate if rate else 1.0
            tasks = [dataclasses.replace(t, arrival=round((t.arrival - t0) * scale, 9)) for t in tasks]
        tasks = [t for t in tasks if t.arrival < seconds] or tasks[:1]
        nodes = policy_workload(policy, self.tenants(1.0), 0.01, self.nodes, self.executors, self.queue, seed=seed).nodes
        out = Scenario(nodes, tuple(tasks))
        check_fields(policy, out, "trace")
        return out
