"""Stage 1 of the compiler: everything known about a policy before any plan -- units, State, Score's shape.

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> a = analyze(load_policy("drf_lb"))
    >>> [u.id for u in a.score_units], a.separability.form, a.delta_hooks()
    (['Score.1', 'Score.2', 'Score.3'], 'additive', ('OnDispatch', 'OnFinish'))
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ray_adaptive.compiler.separability import Separability, separability
from ray_adaptive.compiler.units import StateUpdate, StateVar, Unit, classify_state, split_units
from ray_adaptive.dsl import ir

__all__ = ["Analysis", "analyze"]


@dataclass(frozen=True)
class Analysis:
    """Everything stage 1 knows about a policy: its units, State and Score's shape."""

    policy: ir.Policy = field(repr=False)
    units: tuple[Unit, ...]
    updates: tuple[StateUpdate, ...]
    state: tuple[StateVar, ...]
    separability: Separability

    @property
    def score_units(self) -> tuple[Unit, ...]:
        return tuple(u for u in self.units if u.function == "Score")

    @property
    def hook_units(self) -> tuple[Unit, ...]:
        return tuple(u for u in self.units if u.function != "Score")

    @property
    def probes(self) -> bool:
        """Score reads a remote node value, so load approximations apply."""
        return any(u.probes for u in self.score_units)

    def var(self, name: str) -> StateVar:
        for v in self.state:
            if v.name == name:
                return v
        raise KeyError(name)

    def delta_hooks(self) -> tuple[str, ...]:
        """Hooks whose effect is a fixed delta per task: every State write is an ``add`` update
        (``+=``/``-=``) and nothing but task fields and constant State is read (no node, no clock,
        no branching on State). Running one is the same as adding a delta that depends only on the
        task's fields -- what lets the simulator compute it once per kind of task."""
        constant = {v.name for v in self.state if not v.dynamic}
        out = []
        for h in self.policy.hooks:
            units = [u for u in self.hook_units if u.function == h.name]
            updates = [x for x in self.updates if x.unit in {u.id for u in units}]
            if not updates or any(x.merge != "add" for x in updates):
                continue
            ok = True
            for u in units:
                written = set(u.state_writes)
                for a in u.reads:
                    if a.kind in ("node", "probe", "clock", "cluster"):
                        ok = False
                    elif a.kind == "state" and a.name not in constant and not (a.name in written and isinstance(u.stmt, ir.Assign)):
                        ok = False
                if isinstance(u.stmt, ir.If):
                    ok = False
            if ok:
                out.append(h.name)
        return tuple(out)

    def score_state(self) -> tuple[StateVar, ...]:
        """State variables Score reads that hooks change: what replicas must keep in sync."""
        return tuple(v for v in self.state if v.readers and v.dynamic)

    def as_dict(self) -> dict:
        return {
            "policy": self.policy.name,
            "units": [u.as_dict() for u in self.units],
            "state": [v.as_dict() for v in self.state],
            "updates": [u.as_dict() for u in self.updates],
            "separability": self.separability.as_dict(),
        }


def analyze(policy: ir.Policy) -> Analysis:
    """Stage 1: units, State classification and Score's separability of ``policy``."""
    units = split_units(policy)
    updates, state = classify_state(policy, units)
    return Analysis(policy, units, updates, state, separability(policy, units))
