"""Stage 4 of the compiler: pick a plan from the estimates, and say why for every plan.

1. Drop plans that cannot run (their heartbeat rounds alone outlast the period).
2. Drop plans whose competitive ratio exceeds the policy's ``[limit=...]``.
   A plan whose ratio is within the limit but whose 95% interval reaches
   above it is *at risk*: it is dropped too, unless no plan is safely
   within the limit (then at-risk plans count as within).
3. Drop plans whose throughput is below the arrival rate plus ``headroom``
   (default 10%: a scheduler run at 100% has unbounded queues).
4. Of the rest, the lowest latency; plans within ``tie`` (default 5%) of it
   are near-ties, which go to the simpler plan: centralized before
   decentralized before hybrid, then fewer approximations; then to the plan
   whose ratio's interval stays furthest below the limit (near-ties are too
   close to call on latency, and the ratio is the estimate the compiler is
   least sure of).
5. If no plan carries the rate: the highest-throughput plan within the limit
   (the paper's Table 1: hybrid above saturation). If no plan meets the
   limit at all: the one with the best competitive ratio.

Example:
    >>> from ray_adaptive.compiler.estimates import SKIPPED, Estimate
    >>> from ray_adaptive.compiler.enumeration import Plan
    >>> from ray_adaptive.plan import LoadView, Sync
    >>> def est(arch, lat, tp, cr, ci=None):
    ...     plan = Plan(arch, arch, LoadView(), Sync(), 0, ())
    ...     return Estimate(plan, (), lat, lat, 0.0, {}, 1.0, tp, cr, {"ci": ci or [cr, cr]})
    >>> es = [est("centralized", 2.5e-3, 400, 1.0), est("decentralized", 2.5e-3, 2000, 2.1), est("hybrid", 4e-3, 470, 1.0)]
    >>> c = choose(es, rate=600, limit=1.2)
    >>> c.estimate.plan.name, c.why
    ('hybrid', 'no plan carries 600 tasks/s (+10% headroom); chosen for the highest throughput within the limit (470 tasks/s)')
    >>> es[1] = est("decentralized", 2.5e-3, 2000, 1.15, [1.05, 1.3])   # within, but its interval reaches 1.3
    >>> c = choose(es, rate=600, limit=1.2)
    >>> c.estimate.plan.name, c.verdicts["decentralized"].why
    ('hybrid', 'at risk: competitive ratio 1.15, but its 95% interval reaches 1.30 > limit 1.2')
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from ray_adaptive.compiler.estimates import SKIPPED, Estimate

__all__ = ["Verdict", "Choice", "choose", "undecided"]


@dataclass(frozen=True)
class Verdict:
    kept: bool
    why: str


@dataclass(frozen=True)
class Choice:
    """The chosen plan's estimate, why it won, and a verdict for every plan (by name)."""

    estimate: Estimate
    why: str
    verdicts: dict


def _ms(s: float) -> str:
    return f"{s * 1e3:.2f} ms"


def _quality(e: Estimate, limit: Optional[float]) -> str:
    """``"ok"``, ``"at risk"``, or why the plan is out on quality."""
    if e.cannot_run:
        return f"cannot run: {e.cannot_run}"
    if limit is None:
        return "ok"
    if e.quality.get("skipped"):
        return SKIPPED
    cr = e.competitive_ratio
    if math.isnan(cr):
        return "competitive ratio not estimated"
    if cr > limit:
        return f"competitive ratio {cr:.2f} > limit {limit:g}"
    hi = e.interval[1]
    return "at risk" if not math.isnan(hi) and hi > limit else "ok"


def _upper(e: Estimate) -> float:
    """How far up a plan's competitive ratio may be: its interval's upper end (the ratio when it has no
    interval; inf when it has not been estimated)."""
    hi = e.interval[1]
    if not math.isnan(hi):
        return hi
    return e.competitive_ratio if not math.isnan(e.competitive_ratio) else math.inf


def choose(estimates: Sequence[Estimate], rate: Optional[float], limit: Optional[float],
           headroom: float = 0.1, tie: float = 0.05) -> Choice:
    """Apply the rules above; ``rate`` None keeps every plan on throughput, ``limit`` None on quality."""
    if not estimates:
        raise ValueError("there is no plan to choose from")
    if headroom < 0 or tie < 0:
        raise ValueError(f"headroom and tie must be >= 0, found {headroom} and {tie}")
    need = rate * (1 + headroom) if rate else 0.0
    quality = {e.plan.name: _quality(e, limit) for e in estimates}
    safe_exists = any(q == "ok" for q in quality.values())
    verdicts: dict[str, Verdict] = {}
    kept, within = [], []
    for e in estimates:
        reasons = []
        q = quality[e.plan.name]
        if q == "at risk" and safe_exists:
            lo, hi = e.interval
            reasons.append(f"at risk: competitive ratio {e.competitive_ratio:.2f}, but its 95% interval reaches "
                           f"{hi:.2f} > limit {limit:g}")
        elif q not in ("ok", "at risk"):
            reasons.append(q)
        else:
            within.append(e)
        if rate and e.throughput < need and not e.cannot_run:
            reasons.append(f"throughput {e.throughput:.0f}/s < {rate:.0f}/s + {headroom:.0%} headroom")
        if reasons:
            verdicts[e.plan.name] = Verdict(False, "; ".join(reasons))
        else:
            kept.append(e)
            what = f"carries {rate:.0f}/s" if rate else "no rate given"
            if limit is not None:
                what += f" within the limit {limit:g}" + (" (at risk, as every plan)" if q == "at risk" else "")
            verdicts[e.plan.name] = Verdict(True, what)
    if kept:
        best = min(e.latency_s for e in kept)
        near = [e for e in kept if e.latency_s <= best * (1 + tie)]
        margin = (lambda e: _upper(e)) if limit is not None else (lambda e: 0.0)
        chosen = min(near, key=lambda e: (e.plan.complexity, margin(e), e.latency_s))
        fastest = min(near, key=lambda e: (e.latency_s, e.plan.complexity))
        if chosen.latency_s <= best * (1 + 1e-12):
            why = f"lowest latency ({_ms(chosen.latency_s)})"
            if len(near) > 1:
                why += f" and the simplest of {len(near)} plans within {tie:.0%} of it"
        else:
            why = f"within {tie:.0%} of the lowest latency ({_ms(chosen.latency_s)} vs {_ms(best)}) and " + (
                "simpler" if chosen.plan.complexity < fastest.plan.complexity else
                f"further within the limit (its ratio's interval reaches {_upper(chosen):.2f}, "
                f"{fastest.plan.name}'s {_upper(fastest):.2f})")
        verdicts[chosen.plan.name] = Verdict(True, f"{verdicts[chosen.plan.name].why}; {why}")
    elif within:
        chosen = min(within, key=lambda e: (-round(e.throughput, 6), e.plan.complexity, e.latency_s))
        why = (f"no plan carries {rate:.0f} tasks/s (+{headroom:.0%} headroom); "
               f"chosen for the highest throughput within the limit ({chosen.throughput:.0f} tasks/s)")
        verdicts[chosen.plan.name] = Verdict(False, why)
    else:
        runnable = [e for e in estimates if not e.cannot_run and not math.isnan(e.competitive_ratio)] or list(estimates)
        chosen = min(runnable, key=lambda e: (e.competitive_ratio if not math.isnan(e.competitive_ratio) else math.inf,
                                              -e.throughput))
        why = f"no plan meets the limit {limit:g}; chosen for the best competitive ratio ({chosen.competitive_ratio:.2f})"
        verdicts[chosen.plan.name] = Verdict(False, why)
    return Choice(chosen, why, verdicts)


def _known(e: Estimate) -> bool:
    return bool(e.cannot_run) or "ci" in e.quality


def undecided(estimates: Sequence[Estimate], rate: Optional[float], limit: Optional[float],
              headroom: float = 0.1, tie: float = 0.05) -> list[Estimate]:
    """The plans whose competitive ratio must still be estimated before :func:`choose` decides, the most
    telling first; [] once no estimate still to come can change the choice.

    Replays are the compiler's cost, and most plans' ratios cannot change the choice: a plan is
    chosen for its latency among the plans that carry the rate, so only the carriers up to the
    first one safely within the limit, and those within ``tie`` of its latency, matter; if none is,
    the plans that do not carry the rate, by throughput, up to the first safely within the limit.
    (Estimates with a ratio, or that cannot run, are known.)

    Example:
        >>> from ray_adaptive.compiler.enumeration import Plan
        >>> from ray_adaptive.plan import LoadView, Sync
        >>> def est(name, arch, lat, tp, ci=None):
        ...     plan = Plan(name, arch, LoadView(), Sync(), 0, ())
        ...     return Estimate(plan, (), lat, lat, 0.0, {}, 1.0, tp, ci[0] if ci else float("nan"), {"ci": ci} if ci else {})
        >>> es = [est("C", "centralized", 2.5e-3, 400), est("D", "decentralized", 2.2e-3, 2000), est("H", "hybrid", 4e-3, 470)]
        >>> [e.plan.name for e in undecided(es, rate=100, limit=1.2)]   # all carry 100/s: by latency
        ['D', 'C', 'H']
        >>> es[1] = est("D", "decentralized", 2.2e-3, 2000, [1.0, 1.01])
        >>> [e.plan.name for e in undecided(es, rate=100, limit=1.2)]   # D is safe; C is 14% slower
        []
    """
    if limit is None:
        return []
    need = rate * (1 + headroom) if rate else 0.0
    runnable = [e for e in estimates if not e.cannot_run]
    carriers = sorted((e for e in runnable if not rate or e.throughput >= need), key=lambda e: e.latency_s)
    first = None
    for i, e in enumerate(carriers):
        if not _known(e):
            return [x for x in carriers[i:] if not _known(x)]
        if _quality(e, limit) == "ok":
            first = e
            break
    if first is not None:
        return [e for e in carriers if e.latency_s <= first.latency_s * (1 + tie) and not _known(e)]
    others = sorted((e for e in runnable if e not in carriers),
                    key=lambda e: (-round(e.throughput, 6), e.plan.complexity, e.latency_s))
    for i, e in enumerate(others):
        if not _known(e):
            return [x for x in others[i:] if not _known(x)]
        if _quality(e, limit) == "ok":
            return []
    return []
