"""Synthetic workloads: multi-tenant Poisson arrivals as scenario dicts."""

from __future__ import annotations

from typing import Optional

import numpy as np


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
) -> dict:
    """A scenario dict: each tenant submits Poisson arrivals at its rate (tasks/s).

    Task fields are ``tenant`` and ``resource_vec`` (the DRF-LB policies' Task).

    Example:
        >>> sc = multi_tenant({"a": 10, "b": 30}, seconds=1.0, nodes=2, seed=1)
        >>> len(sc["nodes"]), sorted({t["fields"]["tenant"] for t in sc["tasks"]})
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
    tasks = [
        {
            "id": f"t{i}",
            "arrival": t,
            "duration": duration,
            "timeout": timeout,
            "fields": {"tenant": tenant, "resource_vec": list(vecs.get(tenant, [0.1, 0.2, 0.1]))},
        }
        for i, (t, tenant) in enumerate(arrivals)
    ]
    return {
        "nodes": [{"id": f"n{i}", "executors": executors, "queue": queue} for i in range(nodes)],
        "tasks": tasks,
    }
