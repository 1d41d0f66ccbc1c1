"""Metrics: max-min fair shares, service ratios, Jain's index; the competitive ratio."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np


def max_min_fair_share(demands: Mapping[str, float], capacity: float,
                       weights: Optional[Mapping[str, float]] = None) -> dict[str, float]:
    """(Weighted) water-filling: each tenant gets min(demand, its weight x a level), the level set so the
    shares use all of ``capacity`` (or every demand is met). Without weights, every weight is 1.

    Example:
        >>> max_min_fair_share({"a": 20, "b": 60, "c": 20}, 80)
        {'a': 20.0, 'b': 40.0, 'c': 20.0}
        >>> max_min_fair_share({"a": 50, "b": 50}, 60, weights={"a": 1, "b": 2})
        {'a': 20.0, 'b': 40.0}
    """
    w = {k: float(weights.get(k, 1.0)) if weights else 1.0 for k in demands}
    bad = [k for k, x in w.items() if not x > 0]
    if bad:
        raise ValueError(f"weights must be > 0, found {bad[0]!r}: {w[bad[0]]}")
    share = {k: 0.0 for k in demands}
    left = float(capacity)
    active = sorted(demands, key=lambda k: demands[k] / w[k])  # who is satisfied first as the level rises
    while active and left > 1e-12:
        per_weight = left / sum(w[k] for k in active)
        k = active[0]
        if demands[k] - share[k] <= w[k] * per_weight:
            left -= demands[k] - share[k]
            share[k] = float(demands[k])
            active.pop(0)
        else:
            for k in active:
                share[k] += w[k] * per_weight
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


def service_ratios(goodput: Mapping[str, float], demands: Mapping[str, float], capacity: float,
                   weights: Optional[Mapping[str, float]] = None) -> dict[str, float]:
    """Each tenant's goodput divided by its (weighted) max-min fair share of ``capacity``."""
    fair = max_min_fair_share(demands, capacity, weights)
    return {k: (goodput.get(k, 0.0) / fair[k] if fair[k] > 0 else 1.0) for k in demands}


# ------------------------------------------------------------ competitive ratio
#
# At each decision a plan makes, S = Score_ideal(t_impl, n_impl) and
# S* = Score_ideal(t_ideal, n_ideal), on the exact global state: the minimum
# over all (pending task, candidate node) pairs -- or, when there is room for
# m > 1 of the pending tasks and the plan makes m decisions at once (its
# decentralized schedulers holding tasks), the m-th best task at its best
# node (the ideal decision the plan's one displaces; see
# ray_adaptive.sim.ratio). Lower
# scores are better, and the paper's ratio is S / S* -- when S* > 0. Scores can
# be 0 (an idle node, a tenant holding nothing) or negative (bin_pack's
# -load, priority's -priority*1000), where S / S* is undefined or inverted.
# We use
#
#     r = 1 + (S - S*) / max(S*, scale)
#
# which *is* S / S* whenever S* >= scale, and otherwise measures the regret
# S - S* in units of `scale`, the policy's typical score where this run
# operates: the interquartile mean of |S*| over its decisions (non-zero ones;
# 1 if there are none) -- the mean of the middle half, robust to outliers as
# a median is, but with no jump: scores are often counts (DRF-LB's shares
# move in steps of one task), and a median sitting between two steps jumps
# from one to the other between two runs of one plan, and the ratio with it
# (docs/compiler.md, the competitive ratio). A run's own, because scores scale with the load a plan carries --
# DRF's shares grow with the tasks running -- and a plan that decides too
# slowly to fill the cluster holds far fewer than the ideal would: measured
# against the ideal's scores, its choices (a tenant holding 3x another's
# share) would read as small regrets. The compiler's estimate and the
# simulator's judgement of a whole run use the same rule. It is
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
    """The policy's typical score: the interquartile mean of |S*| over decisions with a non-zero, finite S*
    (1 if none): the middle half's mean, a quarter of the values left out at each end.

    Example:
        >>> score_scale([200] * 45 + [300] * 55), score_scale([200] * 55 + [300] * 45)   # (medians: 300, 200)
        (260.0, 240.0)
    """
    a = np.abs(np.asarray(ideal, dtype=float))
    a = np.sort(a[np.isfinite(a) & (a > 0)])
    if not a.size:
        return 1.0
    cut = a.size // 4
    return float(a[cut:a.size - cut].mean())


def decision_ratios(impl: Sequence[float], ideal: Sequence[float], scale: float, cap: float = 100.0) -> np.ndarray:
    """Per-decision ratio ``1 + (S - S*) / max(S*, scale)``, capped at ``cap``."""
    s = np.asarray(impl, dtype=float)
    best = np.asarray(ideal, dtype=float)
    with np.errstate(invalid="ignore"):
        r = 1.0 + (s - best) / np.maximum(best, scale)
    r[~np.isfinite(r)] = cap
    return np.clip(r, 1.0, cap)


def competitive_ratio(impl: Sequence[float], ideal: Sequence[float], scale: Optional[float] = None,
                      limit: Optional[float] = None, cap: float = 100.0, times: Optional[Sequence[float]] = None,
                      batch: int = 25, batch_s: float = 0.0, widen: float = 1.0) -> dict:
    """Summary of a run's decisions: mean (the estimate) with its 95% interval (``ci``, see
    :func:`mean_interval`; batches of ``batch_s`` seconds by ``times``, or of ``batch`` decisions;
    its half-width times ``widen``), p90, max, share above ``limit``, n, scale.

    Example:
        >>> competitive_ratio([10, 12, 0, 1], [10, 10, 0, 0], scale=2.0)["mean"]
        1.175
    """
    scale = score_scale(ideal) if scale is None else scale
    r = decision_ratios(impl, ideal, scale, cap)
    if r.size == 0:
        return {"mean": 1.0, "ci": [1.0, 1.0], "p90": 1.0, "max": 1.0, "above_limit": 0.0, "n": 0,
                "scale": round(scale, 6)}
    _, half = mean_interval(batch_means(r, None if times is None else np.asarray(times), batch, batch_s))
    half *= widen
    mean = float(r.mean())
    return {
        "mean": round(mean, 4),
        "ci": [round(max(1.0, mean - half), 4), round(mean + half, 4) if math.isfinite(half) else math.inf],
        "p90": round(float(np.percentile(r, 90)), 4),
        "max": round(float(r.max()), 4),
        "above_limit": round(float(np.mean(r > limit)), 4) if limit else 0.0,
        "n": int(r.size),
        "scale": round(scale, 6),
    }


# ------------------------------------------- how sure an estimate is, and when a replay may stop
#
# Decisions share queue states and State replicas, so single decisions are far
# from independent. The interval of a mean ratio is taken over *batches* of
# consecutive decisions (the batch-means method of simulation output
# analysis): for a plan with a sync or heartbeat period, batches of half that
# period (a replica's divergence grows and is reset once a period); otherwise
# batches of `batch` decisions. The half-width is Student's t times the
# standard error of the batch means, widened by the lag-one autocorrelation of
# those means when there are enough to measure it (positively correlated
# batches carry less information than their number says).
#
# The compiler replays every plan only to place its mean ratio against the
# policy's limit (and to print it). A plan far above the limit -- a
# decentralized one at 1.7 against 1.2 -- is out after a hundred decisions as
# surely as after five hundred, and the rest of its replay is wasted. So a
# replay stops once its mean is *settled above* the limit: once its interval at
# `z` (3: 99.7%) lies clear above it, after at least `min_batches` batches.
# It does not stop because its plan *looks* safely within the limit.
# Contention comes in episodes seconds apart -- a burst of arrivals, a backlog
# building near the execution bound -- and between them every plan's decisions
# are ideal: a replay that stops on a calm stretch stops because it has not
# met an episode yet, and what it misses can only make the plan worse than it
# looked (docs/compiler.md, estimates, has a case). Stopping early above the
# limit errs, if at all, on the side of caution. Within or near the limit the
# replay runs to its end, and its interval says how sure the estimate is.

_T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 12: 2.18,
        15: 2.13, 20: 2.09, 30: 2.04}


def _t95(dof: int) -> float:
    """Student's t at 97.5% (a two-sided 95% interval) for ``dof`` degrees of freedom."""
    known = [d for d in _T95 if d <= dof]
    return _T95[max(known)] if known else _T95[1] if dof < 30 else 1.96


def batch_means(ratios: np.ndarray, times: Optional[np.ndarray] = None, batch: int = 25,
                batch_s: float = 0.0) -> np.ndarray:
    """Means of consecutive batches: of ``batch_s`` seconds (by ``times``) when given, else of ``batch``
    decisions; a last, partial batch is left out unless it is more than half full."""
    r = np.asarray(ratios, dtype=float)
    if r.size == 0:
        return r
    if batch_s > 0 and times is not None and len(times) == r.size:
        t = np.asarray(times, dtype=float)
        ids = np.floor((t - t[0]) / batch_s).astype(np.int64)
        counts = np.bincount(ids)
        sums = np.bincount(ids, weights=r)
        keep = counts > 0
        if ids[-1] > 0 and (t[-1] - t[0]) - ids[-1] * batch_s < batch_s / 2:
            keep[-1] = False  # the last batch is less than half the length of the others
        return sums[keep] / counts[keep]
    n = r.size // batch * batch
    full = r[:n].reshape(-1, batch).mean(axis=1)
    rest = r[n:]
    return np.append(full, rest.mean()) if rest.size > batch / 2 else full


def mean_interval(means: np.ndarray, z: Optional[float] = None) -> tuple[float, float]:
    """(mean, half-width) of the mean of batch means: Student's t at 95% (or ``z``) times the standard
    error, widened by ``sqrt((1 + r1) / (1 - r1))`` for a lag-one autocorrelation r1 > 0 (6+ batches)."""
    m = np.asarray(means, dtype=float)
    if m.size < 2:
        return (float(m.mean()) if m.size else 1.0), math.inf
    mean, sd = float(m.mean()), float(m.std(ddof=1))
    widen = 1.0
    if m.size >= 6 and sd > 0:
        d = m - mean
        r1 = min(0.9, float(np.dot(d[:-1], d[1:]) / np.dot(d, d)))
        if r1 > 0:
            widen = math.sqrt((1 + r1) / (1 - r1))
    q = z if z is not None else _t95(m.size - 1)
    return mean, q * sd / math.sqrt(m.size) * widen


@dataclass(frozen=True)
class Settle:
    """When a replay's competitive ratio is settled above the limit, so that the replay may stop (see above).

    Example:
        >>> Settle(limit=1.2).done([10.0] * 100, [10.0] * 100)   # ideal decisions: within, so no stop
        False
        >>> Settle(limit=1.2).done([20.0] * 100, [10.0] * 100)   # every decision at 2x: out
        True
    """

    limit: Optional[float] = None
    batch: int = 25
    batch_s: float = 0.0  # batches of this many seconds (a plan's half period), else of `batch` decisions
    min_batches: int = 4
    z: float = 3.0

    def __post_init__(self):
        if self.batch < 1 or self.min_batches < 2:
            raise ValueError(f"Settle needs batch >= 1 and min_batches >= 2, found {self.batch}, {self.min_batches}")

    def done(self, impl: Sequence[float], ideal: Sequence[float], times: Optional[Sequence[float]] = None) -> bool:
        """Whether the decisions so far put the mean ratio surely above the limit (the run's own score
        scale: the final one, the ideal scheduler's, is not known while plans replay side by side)."""
        if self.limit is None or len(impl) < self.batch * self.min_batches:
            return False
        r = decision_ratios(impl, ideal, score_scale(ideal))
        means = batch_means(r, None if times is None else np.asarray(times), self.batch,
                            self.batch_s if times is not None else 0.0)
        if means.size < self.min_batches:
            return False
        mean, half = mean_interval(means, z=self.z)
        return mean - half > self.limit
