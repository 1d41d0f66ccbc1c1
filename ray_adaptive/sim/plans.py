"""The vocabulary of implementation plans, as the simulator (and later the runtime) runs them.

A plan, lowered from the compiler's choice of where each execution unit runs
and which approximations apply, is a :class:`SimPlan`:

* ``architecture`` -- ``centralized`` (one selector: global pending queue,
  exact State), ``decentralized`` (k schedulers, each with the tasks
  submitted to it and a replica of State), or ``hybrid`` (a central selector
  picks the *task* by the task part of a separable Score and forwards it to
  one of k placement schedulers, which picks the *node* by the node part);
* ``load`` -- a :class:`LoadView`: how schedulers learn node loads (and so
  which nodes have room): ``probe`` every node per decision, ``sample`` d
  random nodes (power-of-d choices), or ``cached`` values refreshed by
  heartbeats every ``period_s`` (plus the scheduler's own dispatches since);
* ``sync`` -- a :class:`Sync`: how replicas of State agree: ``exact`` (one
  owner, no replicas), ``instant`` (every decision reads the shared store,
  every update writes it), ``periodic`` (push local updates and pull the
  merged State every ``period_s``);
* ``central`` / ``local`` -- :class:`RoleCosts`, the busy time each role is
  charged per message, decision attempt, probe, store access and heartbeat
  round: the compiler's latency model, charged as is by the simulator.

Example:
    >>> LoadView.sample(2).label, LoadView.cached(0.01).label, Sync.periodic(0.1).label
    ('power-of-2', 'heartbeat 10ms', 'sync 100ms')
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from ray_adaptive.dsl.ir import Policy
from ray_adaptive.sim.scoring import ScoreSplit

__all__ = ["ARCHITECTURES", "LoadView", "Sync", "RoleCosts", "SimPlan"]

ARCHITECTURES = ("centralized", "decentralized", "hybrid")


def _ms(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:g}ms" if ms >= 1 else f"{ms * 1000:g}us"


@dataclass(frozen=True)
class LoadView:
    """How a scheduler learns ``get_load(node)`` and which nodes have room."""

    kind: str = "probe"  # "probe" | "sample" | "cached"
    d: int = 0  # sample: nodes probed per decision attempt
    period_s: float = 0.0  # cached: heartbeat period

    def __post_init__(self):
        if self.kind not in ("probe", "sample", "cached"):
            raise ValueError(f"LoadView kind must be 'probe', 'sample' or 'cached', found {self.kind!r}")
        if self.kind == "sample" and self.d < 1:
            raise ValueError(f"LoadView.sample needs d >= 1 nodes per decision, found {self.d}")
        if self.kind == "cached" and not (self.period_s > 0 and math.isfinite(self.period_s)):
            raise ValueError(f"LoadView.cached needs a heartbeat period > 0 seconds, found {self.period_s}")

    @classmethod
    def probe(cls) -> "LoadView":
        return cls("probe")

    @classmethod
    def sample(cls, d: int) -> "LoadView":
        return cls("sample", d=d)

    @classmethod
    def cached(cls, period_s: float) -> "LoadView":
        return cls("cached", period_s=period_s)

    @property
    def label(self) -> str:
        return {"probe": "probe", "sample": f"power-of-{self.d}", "cached": f"heartbeat {_ms(self.period_s)}"}[self.kind]

    def probes(self, nodes: int) -> int:
        """Nodes probed per decision attempt."""
        return {"probe": nodes, "sample": min(self.d, nodes), "cached": 0}[self.kind]

    def as_dict(self) -> dict:
        d = {"kind": self.kind}
        if self.kind == "sample":
            d["d"] = self.d
        if self.kind == "cached":
            d["period_s"] = self.period_s
        return d


@dataclass(frozen=True)
class Sync:
    """How replicas of State agree."""

    kind: str = "exact"  # "exact" | "instant" | "periodic"
    period_s: float = 0.0

    def __post_init__(self):
        if self.kind not in ("exact", "instant", "periodic"):
            raise ValueError(f"Sync kind must be 'exact', 'instant' or 'periodic', found {self.kind!r}")
        if self.kind == "periodic" and not (self.period_s > 0 and math.isfinite(self.period_s)):
            raise ValueError(f"Sync.periodic needs a period > 0 seconds, found {self.period_s}")

    @classmethod
    def exact(cls) -> "Sync":
        return cls("exact")

    @classmethod
    def instant(cls) -> "Sync":
        return cls("instant")

    @classmethod
    def periodic(cls, period_s: float) -> "Sync":
        return cls("periodic", period_s)

    @property
    def label(self) -> str:
        return {"exact": "exact state", "instant": "store per decision", "periodic": f"sync {_ms(self.period_s)}"}[self.kind]

    def as_dict(self) -> dict:
        return {"kind": self.kind, **({"period_s": self.period_s} if self.kind == "periodic" else {})}


@dataclass(frozen=True)
class RoleCosts:
    """Busy seconds charged to one scheduler of a role (the plan's latency model).

    ``recv_s``: per task received (a submission, or a task forwarded by the
    hybrid's selector); ``send_s``: per task sent (to a node, or forwarded);
    ``finish_s``: per finish notification handled (0 when the role keeps no
    State that OnFinish changes and needs no room accounting);
    ``compute_s``: the execution units' compute per decision attempt;
    ``probe_s``: per node probed; ``sync_s``: per periodic sync (push +
    pull); ``heartbeat_s``: per heartbeat round (all nodes' load reports).
    Shared-store accesses of ``instant`` sync are folded into ``compute_s``
    (a read per decision) and the message costs (a write per hook run) by
    the compiler.
    """

    recv_s: float = 0.0
    send_s: float = 0.0
    finish_s: float = 0.0
    compute_s: float = 0.0
    probe_s: float = 0.0
    sync_s: float = 0.0
    heartbeat_s: float = 0.0

    def __post_init__(self):
        for k, v in self.__dict__.items():
            if not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"RoleCosts.{k} must be a finite number of seconds >= 0, found {v}")

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class SimPlan:
    """One implementation plan in the form the simulator runs.

    ``policy`` is the full policy (what the centralized and decentralized
    schedulers score with, and what the ideal scores with). For ``hybrid``,
    ``task_policy`` and ``node_policy`` are the two scoring programs the
    compiler split Score into (same State and hooks; Score = the task part /
    the node part). ``schedulers`` is k, the decentralized or placement
    schedulers (0: one per node). ``local_state``: whether the hybrid's
    placement schedulers keep a replica of State (their node part reads
    State that hooks change). ``merge``: ``(variable, rule)`` for each State
    variable hooks change -- ``add``, ``max``, ``min`` or ``none`` (last
    writer wins) -- which is how periodic sync merges replicas.
    ``delta_hooks``: hooks whose effect is a fixed ``add`` delta per task (see
    :meth:`ray_adaptive.compiler.units.Analysis.delta_hooks`): the simulator
    computes each delta once per kind of task, with the interpreter, and
    then adds it -- the same State, a fraction of the work.
    ``split``: ``policy``'s Score as ``op(T(task), N(node))`` (see
    :func:`ray_adaptive.compiler.units.score_split`): the schedulers and the
    competitive ratio then score each task group and node once instead of
    every pair -- the same decisions and scores, a fraction of the work;
    ``task_split`` / ``node_split``: the same for the hybrid's two scoring
    programs (one-sided: Score = T, Score = N).
    """

    name: str
    architecture: str
    policy: Policy = field(repr=False)
    load: LoadView = LoadView()
    sync: Sync = Sync()
    central: RoleCosts = RoleCosts()
    local: RoleCosts = RoleCosts()
    schedulers: int = 0
    task_policy: Optional[Policy] = field(default=None, repr=False)
    node_policy: Optional[Policy] = field(default=None, repr=False)
    local_state: bool = False
    merge: tuple = ()
    delta_hooks: tuple = ()
    split: Optional[ScoreSplit] = None
    task_split: Optional[ScoreSplit] = None
    node_split: Optional[ScoreSplit] = None

    def __post_init__(self):
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"architecture must be one of {', '.join(ARCHITECTURES)}, found {self.architecture!r}")
        if self.schedulers < 0:
            raise ValueError(f"schedulers must be >= 0 (0: one per node), found {self.schedulers}")
        if self.architecture == "hybrid" and (self.task_policy is None or self.node_policy is None):
            raise ValueError("a hybrid plan needs task_policy and node_policy (the two parts of a separable Score)")
        if self.architecture == "centralized" and self.sync.kind != "exact":
            raise ValueError(f"a centralized plan has one copy of State: sync must be exact, found {self.sync.label}")

    def k(self, nodes: int) -> int:
        """Number of decentralized / placement schedulers on a cluster of ``nodes``."""
        return self.schedulers or nodes
