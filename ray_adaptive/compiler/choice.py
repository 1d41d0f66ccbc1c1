"""Stage 4 of the compiler: pick a plan from the estimates, and say why for every plan.

1. Drop plans whose competitive ratio exceeds the policy's ``[limit=...]``.
2. Drop plans whose throughput is below the arrival rate plus ``headroom``
   (default 10%: a scheduler run at 100% has unbounded queues).
3. Of the rest, the lowest latency; plans within ``tie`` (default 5%) of it
   are near-ties, which go to the simpler plan: centralized before
   decentralized before hybrid, then fewer approximations.
4. If no plan carries the rate: the highest-throughput plan within the limit
   (the paper's Table 1: hybrid above saturation). If no plan meets the
   limit at all: the one with the best competitive ratio.

Example:
    >>> from ray_adaptive.compiler.estimates import Estimate
    >>> from ray_adaptive.compiler.plans import Plan
    >>> from ray_adaptive.plan import LoadView, Sync
    >>> def est(arch, lat, tp, cr):
    ...     plan = Plan(arch, arch, LoadView(), Sync(), 0, ())
    ...     return Estimate(plan, (), lat, lat, 0.0, {}, 1.0, tp, cr)
    >>> es = [est("centralized", 2.5e-3, 400, 1.0), est("decentralized", 2.5e-3, 2000, 2.1), est("hybrid", 4e-3, 470, 1.0)]
    >>> c = choose(es, rate=600, limit=1.2)
    >>> c.estimate.plan.name, c.why
    ('hybrid', 'no plan carries 600 tasks/s (+10% headroom); the highest throughput within the limit (470 tasks/s)')
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from ray_adaptive.compiler.estimates import Estimate

__all__ = ["Verdict", "Choice", "choose"]


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


def choose(estimates: Sequence[Estimate], rate: Optional[float], limit: Optional[float],
           headroom: float = 0.1, tie: float = 0.05) -> Choice:
    """Apply the rules above; ``rate`` None keeps every plan on throughput, ``limit`` None on quality."""
    if not estimates:
        raise ValueError("there is no plan to choose from")
    if headroom < 0 or tie < 0:
        raise ValueError(f"headroom and tie must be >= 0, found {headroom} and {tie}")
    need = rate * (1 + headroom) if rate else 0.0
    verdicts: dict[str, Verdict] = {}
    kept, within = [], []
    for e in estimates:
        reasons = []
        cr = e.competitive_ratio
        ok_quality = limit is None or (not math.isnan(cr) and cr <= limit)
        if not ok_quality:
            reasons.append(f"competitive ratio {cr:.2f} > limit {limit:g}")
        else:
            within.append(e)
        if rate and e.throughput < need:
            reasons.append(f"throughput {e.throughput:.0f}/s < {rate:.0f}/s + {headroom:.0%} headroom")
        if reasons:
            verdicts[e.plan.name] = Verdict(False, "; ".join(reasons))
        else:
            kept.append(e)
            what = f"carries {rate:.0f}/s" if rate else "no rate given"
            verdicts[e.plan.name] = Verdict(True, what + (f" within the limit {limit:g}" if limit is not None else ""))
    if kept:
        best = min(e.latency_s for e in kept)
        near = [e for e in kept if e.latency_s <= best * (1 + tie)]
        chosen = min(near, key=lambda e: (e.plan.complexity, e.latency_s))
        if chosen.latency_s <= best * (1 + 1e-12):
            why = f"lowest latency ({_ms(chosen.latency_s)})"
            if len(near) > 1:
                why += f" and the simplest of {len(near)} plans within {tie:.0%} of it"
        else:
            why = f"within {tie:.0%} of the lowest latency ({_ms(chosen.latency_s)} vs {_ms(best)}) and simpler"
    elif within:
        chosen = min(within, key=lambda e: (-round(e.throughput, 6), e.plan.complexity, e.latency_s))
        why = (f"no plan carries {rate:.0f} tasks/s (+{headroom:.0%} headroom); "
               f"the highest throughput within the limit ({chosen.throughput:.0f} tasks/s)")
    else:
        chosen = min(estimates, key=lambda e: (e.competitive_ratio, -e.throughput))
        why = f"no plan meets the limit {limit:g}; the best competitive ratio ({chosen.competitive_ratio:.2f})"
    v = verdicts[chosen.plan.name]
    verdicts[chosen.plan.name] = Verdict(v.kept, f"{v.why}; chosen: {why}")
    return Choice(chosen, why, verdicts)
