"""Fairness metrics: max-min fair shares, service ratios, Jain's index."""

from __future__ import annotations

from typing import Mapping, Sequence


def max_min_fair_share(demands: Mapping[str, float], capacity: float) -> dict[str, float]:
    """Water-filling: each tenant gets min(demand, an equal share of what is left).

    Example:
        >>> max_min_fair_share({"a": 20, "b": 60, "c": 20}, 80)
        {'a': 20.0, 'b': 40.0, 'c': 20.0}
    """
    share = {k: 0.0 for k in demands}
    left = float(capacity)
    active = sorted(demands, key=lambda k: demands[k])
    while active and left > 1e-12:
        each = left / len(active)
        k = active[0]
        if demands[k] - share[k] <= each:
            left -= demands[k] - share[k]
            share[k] = float(demands[k])
            active.pop(0)
        else:
            for k in active:
                share[k] += each
            left = 0.0
    return share


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when all values are equal, 1/n when one gets everything.

    Example:
        >>> jain_index([1, 1, 1]), round(jain_index([1, 0, 0]), 3)
        (1.0, 0.333)
    """
    values = list(values)
    if not values:
        return 1.0
    total, squares = sum(values), sum(v * v for v in values)
    return 1.0 if squares == 0 else total * total / (len(values) * squares)


def service_ratios(goodput: Mapping[str, float], demands: Mapping[str, float], capacity: float) -> dict[str, float]:
    """Each tenant's goodput divided by its max-min fair share of ``capacity``."""
    fair = max_min_fair_share(demands, capacity)
    return {k: (goodput.get(k, 0.0) / fair[k] if fair[k] > 0 else 1.0) for k in demands}
