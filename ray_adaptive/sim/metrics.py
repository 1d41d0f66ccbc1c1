"""Metrics: max-min fair shares, service ratios, Jain's index; the competitive ratio."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np


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


# ------------------------------------------------------------ competitive ratio
#
# At each decision a plan makes, S = Score_ideal(t_impl, n_impl) and
# S* = Score_ideal(t_ideal, n_ideal), on the exact global state: the minimum
# over all (pending task, candidate node) pairs -- or, when there is room for
# m > 1 of the pending tasks, the m-th best task at its best node (the ideal
# decision the plan's one displaces; see ray_adaptive.sim.plan_sim). Lower
# scores are better, and the paper's ratio is S / S* -- when S* > 0. Scores can
# be 0 (an idle node, a tenant holding nothing) or negative (bin_pack's
# -load, priority's -priority*1000), where S / S* is undefined or inverted.
# We use
#
#     r = 1 + (S - S*) / max(S*, scale)
#
# which *is* S / S* whenever S* >= scale, and otherwise measures the regret
# S - S* in units of `scale`, the policy's typical score: the median |score|
# of the *ideal* scheduler's decisions on the same workload (non-zero ones;
# 1 if there are none) -- one yardstick for every plan. (Without one, a
# run's own median |S*| is used.) It is
# continuous and finite for every finite S, and clamped to >= 1 (a plan's
# pair that is among the ideal's m is ideal). A decision the ideal deems
# infeasible (S = inf) counts as `cap`.
#
# Aggregation: the mean over decisions. Quality losses of a scheduling
# policy (unfair shares, imbalance) accumulate from the *average* bias of its
# decisions, not from the worst single one; the mean is also stable on a few
# hundred samples, where a p99 flips on a handful of decisions. (The p90 and
# the share of decisions above the limit are reported beside it.) At light
# load most decisions have one pending task and room everywhere, so they are
# ideal and pull the mean to 1 -- which is right: nothing was lost there.


def score_scale(ideal: Sequence[float]) -> float:
    """The policy's typical score: median |S*| over decisions with a non-zero, finite S* (1 if none)."""
    a = np.abs(np.asarray(ideal, dtype=float))
    a = a[np.isfinite(a) & (a > 0)]
    return float(np.median(a)) if a.size else 1.0


def decision_ratios(impl: Sequence[float], ideal: Sequence[float], scale: float, cap: float = 100.0) -> np.ndarray:
    """Per-decision ratio ``1 + (S - S*) / max(S*, scale)``, capped at ``cap``."""
    s = np.asarray(impl, dtype=float)
    best = np.asarray(ideal, dtype=float)
    with np.errstate(invalid="ignore"):
        r = 1.0 + (s - best) / np.maximum(best, scale)
    r[~np.isfinite(r)] = cap
    return np.clip(r, 1.0, cap)


def competitive_ratio(impl: Sequence[float], ideal: Sequence[float], scale: Optional[float] = None,
                      limit: Optional[float] = None, cap: float = 100.0) -> dict:
    """Summary of a run's decisions: mean (the estimate), p90, max, share above ``limit``, n, scale.

    Example:
        >>> competitive_ratio([10, 12, 0, 1], [10, 10, 0, 0], scale=2.0)["mean"]
        1.175
    """
    scale = score_scale(ideal) if scale is None else scale
    r = decision_ratios(impl, ideal, scale, cap)
    if r.size == 0:
        return {"mean": 1.0, "p90": 1.0, "max": 1.0, "above_limit": 0.0, "n": 0, "scale": round(scale, 6)}
    return {
        "mean": round(float(r.mean()), 4),
        "p90": round(float(np.percentile(r, 90)), 4),
        "max": round(float(r.max()), 4),
        "above_limit": round(float(np.mean(r > limit)), 4) if limit else 0.0,
        "n": int(r.size),
        "scale": round(scale, 6),
    }


# ------------------------------------------------------- when a replay may stop
#
# The compiler replays every plan only to place its mean ratio against the
# policy's limit (and to print it). Far from the limit -- a centralized plan at
# 1.000, a decentralized one at 1.7 against 1.2 -- a hundred decisions settle
# that as surely as five hundred, and the rest of the replay is wasted. So a
# replay may stop once the mean is *settled*: with decisions cut into
# consecutive batches (their means are nearly independent where single
# decisions, sharing queue states, are not: the batch-means method of
# simulation output analysis), once the mean lies more than z standard errors
# from the limit, or is known to within `precision` (relative) either way.
# Near the limit neither holds, and the replay runs on to its end.


@dataclass(frozen=True)
class Settle:
    """When a replay's competitive ratio is settled enough to stop (see above).

    Example:
        >>> Settle(limit=1.2).done([10.0] * 100, [10.0] * 100)
        True
    """

    limit: Optional[float] = None
    batch: int = 25
    min_batches: int = 4
    z: float = 3.0
    precision: float = 0.01

    def __post_init__(self):
        if self.batch < 1 or self.min_batches < 2:
            raise ValueError(f"Settle needs batch >= 1 and min_batches >= 2, found {self.batch}, {self.min_batches}")

    def done(self, impl: Sequence[float], ideal: Sequence[float]) -> bool:
        """Whether the decisions so far settle the mean ratio (the run's own score scale: the final one,
        the ideal scheduler's, is not known while plans replay side by side)."""
        n = len(impl) // self.batch * self.batch
        if n < self.batch * self.min_batches:
            return False
        means = decision_ratios(impl[:n], ideal[:n], score_scale(ideal[:n])).reshape(-1, self.batch).mean(axis=1)
        mean, half = float(means.mean()), self.z * float(means.std(ddof=1)) / math.sqrt(means.size)
        far = self.limit is not None and abs(mean - self.limit) > half
        return far or half <= self.precision * mean
