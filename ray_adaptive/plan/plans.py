"""A plan: where each execution unit of a policy runs, and which approximations apply.

The compiler enumerates plans (:func:`ray_adaptive.compiler.enumerate_plans`),
estimates them and chooses one; the simulator and the runtime run its
lowered form (:class:`~ray_adaptive.plan.lowered.LoweredPlan`). A plan is:

* an :class:`~ray_adaptive.plan.kinds.Architecture` -- ``centralized``
  (one selector: global pending queue, exact State), ``decentralized``
  (k schedulers, each with the tasks submitted to it and a replica of
  State), or ``hybrid`` (a selector picks the *task* by the task part of a
  separable Score and forwards it to one of k placement schedulers, which
  pick the *node* by the node part);
* a :class:`LoadView` -- how schedulers learn node loads (and so which
  nodes have room): ``probe`` every node per decision, ``sample`` d random
  nodes (power-of-d choices), or ``cached`` values refreshed by heartbeats
  every ``period_s`` (plus the scheduler's own dispatches since);
* a :class:`Sync` -- how replicas of State agree: ``exact`` (one owner, no
  replicas), ``instant`` (every decision reads the shared store, every
  update writes it), ``periodic`` (push local updates and pull the merged
  State every ``period_s``);
* ``schedulers`` (k; 0: one per node), the ``placement`` of every unit and
  where each State variable lives.

Example:
    >>> LoadView.sample(2).label, LoadView.cached(0.01).label, Sync.periodic(0.1).label
    ('power-of-2', 'heartbeat 10ms', 'sync 100ms')
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional

from ray_adaptive.plan.kinds import Architecture, LoadKind, SyncKind

__all__ = ["LoadView", "Sync", "Plan"]

_ARCH_RANK = {a: i for i, a in enumerate(Architecture)}


def _ms(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:g}ms" if ms >= 1 else f"{ms * 1000:g}us"


@dataclass(frozen=True)
class LoadView:
    """How a scheduler learns ``get_load(node)`` and which nodes have room."""

    kind: LoadKind = LoadKind.PROBE
    d: int = 0  # sample: nodes probed per decision attempt
    period_s: float = 0.0  # cached: heartbeat period

    def __post_init__(self):
        object.__setattr__(self, "kind", LoadKind.parse(self.kind))
        if self.kind is LoadKind.SAMPLE and self.d < 1:
            raise ValueError(f"LoadView.sample needs d >= 1 nodes per decision, found {self.d}")
        if self.kind is LoadKind.CACHED and not (self.period_s > 0 and math.isfinite(self.period_s)):
            raise ValueError(f"LoadView.cached needs a heartbeat period > 0 seconds, found {self.period_s}")

    @classmethod
    def probe(cls) -> "LoadView":
        return cls(LoadKind.PROBE)

    @classmethod
    def sample(cls, d: int) -> "LoadView":
        return cls(LoadKind.SAMPLE, d=d)

    @classmethod
    def cached(cls, period_s: float) -> "LoadView":
        return cls(LoadKind.CACHED, period_s=period_s)

    @property
    def label(self) -> str:
        return {LoadKind.PROBE: "probe", LoadKind.SAMPLE: f"power-of-{self.d}",
                LoadKind.CACHED: f"heartbeat {_ms(self.period_s)}"}[self.kind]

    def probes(self, nodes: int) -> int:
        """Nodes probed per decision attempt."""
        return {LoadKind.PROBE: nodes, LoadKind.SAMPLE: min(self.d, nodes), LoadKind.CACHED: 0}[self.kind]

    def as_dict(self) -> dict:
        d: Dict[str, Any] = {"kind": self.kind.value}
        if self.kind is LoadKind.SAMPLE:
            d["d"] = self.d
        if self.kind is LoadKind.CACHED:
            d["period_s"] = self.period_s
        return d


@dataclass(frozen=True)
class Sync:
    """How replicas of State agree."""

    kind: SyncKind = SyncKind.EXACT
    period_s: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "kind", SyncKind.parse(self.kind))
        if self.kind is SyncKind.PERIODIC and not (self.period_s > 0 and math.isfinite(self.period_s)):
            raise ValueError(f"Sync.periodic needs a period > 0 seconds, found {self.period_s}")

    @classmethod
    def exact(cls) -> "Sync":
        return cls(SyncKind.EXACT)

    @classmethod
    def instant(cls) -> "Sync":
        return cls(SyncKind.INSTANT)

    @classmethod
    def periodic(cls, period_s: float) -> "Sync":
        return cls(SyncKind.PERIODIC, period_s)

    @property
    def label(self) -> str:
        return {SyncKind.EXACT: "exact state", SyncKind.INSTANT: "store per decision",
                SyncKind.PERIODIC: f"sync {_ms(self.period_s)}"}[self.kind]

    def as_dict(self) -> dict:
        return {"kind": self.kind.value, **({"period_s": self.period_s} if self.kind is SyncKind.PERIODIC else {})}


@dataclass(frozen=True)
class Plan:
    """Where each execution unit runs and which approximations apply.

    ``placement``: ``(unit id, where)`` with where ``selector``,
    ``schedulers`` or ``selector+schedulers`` (the hybrid's split return).
    ``state``: ``(variable, where)`` -- ``selector`` (one exact copy),
    ``replicas`` (one per scheduler, kept in sync per ``sync``), or ``const``.
    """

    name: str
    architecture: Architecture
    load: LoadView = LoadView()
    sync: Sync = Sync()
    schedulers: int = 0  # decentralized / placement schedulers (0: one per node); 0 for centralized
    placement: tuple[tuple[str, str], ...] = ()
    state: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self):
        object.__setattr__(self, "architecture", Architecture.parse(self.architecture))
        if self.schedulers < 0:
            raise ValueError(f"schedulers must be >= 0 (0: one per node), found {self.schedulers}")
        if self.architecture is Architecture.CENTRALIZED and self.sync.kind is not SyncKind.EXACT:
            raise ValueError(f"a centralized plan has one copy of State: sync must be exact, found {self.sync.label}")

    @property
    def approximations(self) -> tuple[str, ...]:
        out = []
        if self.load.kind is not LoadKind.PROBE:
            out.append(self.load.label)
        if self.sync.kind is SyncKind.PERIODIC:
            out.append(self.sync.label)
        return tuple(out)

    @property
    def complexity(self) -> tuple[int, int, int]:
        """For near-ties: centralized < decentralized < hybrid, then fewer approximations, then k."""
        return (_ARCH_RANK[self.architecture], len(self.approximations), self.schedulers)

    def k(self, nodes: int) -> int:
        """Decentralized / placement schedulers on a cluster of ``nodes`` (0 for centralized)."""
        return 0 if self.architecture is Architecture.CENTRALIZED else (self.schedulers or nodes)

    def where(self, unit_id: str) -> Optional[str]:
        return dict(self.placement).get(unit_id)

    @classmethod
    def from_dict(cls, d: Mapping) -> "Plan":
        """The plan of a plan file entry (:meth:`as_dict`'s output, as ``ray-adaptive compile --json`` writes it)."""
        try:
            load, sync = d["load"], d["sync"]
            arch = Architecture.parse(str(d["architecture"]))
            return cls(
                name=str(d["name"]), architecture=arch,
                load=LoadView(load["kind"], d=int(load.get("d", 0)), period_s=float(load.get("period_s", 0.0))),
                sync=Sync(sync["kind"], float(sync.get("period_s", 0.0))),
                schedulers=0 if arch is Architecture.CENTRALIZED else int(d.get("schedulers", 0)),
                placement=tuple((str(u), str(w)) for u, w in dict(d["placement"]).items()),
                state=tuple((str(v), str(w)) for v, w in dict(d.get("state", {})).items()),
            )
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"not a plan of a plan file (ray-adaptive compile --json): missing or bad {err}") from None

    def as_dict(self, nodes: Optional[int] = None) -> dict:
        return {
            "name": self.name,
            "architecture": self.architecture.value,
            "approximations": list(self.approximations),
            "load": self.load.as_dict(),
            "sync": self.sync.as_dict(),
            "schedulers": self.k(nodes) if nodes else self.schedulers,
            "placement": dict(self.placement),
            "state": dict(self.state),
        }
