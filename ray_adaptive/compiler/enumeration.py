"""Stage 2 of the compiler: the implementation plans a policy's IR allows.

A :class:`Plan` says where each execution unit runs and which
approximations apply. The space is a product, filtered by what the IR
allows (not a fixed list):

* **architecture** -- ``centralized`` (every unit on one selector),
  ``decentralized`` (every unit on each of k schedulers, State replicated),
  ``hybrid`` (task-side units on the selector, node-side units on k
  placement schedulers; the joint return is split into its task and node
  parts). Hybrid needs a separable Score, and the hooks that change State
  the task part reads must not read the node (the selector runs them when
  it forwards, before the node is known).
* **load view** -- how the units that place a task learn node loads:
  ``probe`` every node per decision, ``power-of-d`` (probe d random nodes),
  or ``heartbeat h`` (cached loads refreshed every h, plus the scheduler's
  own dispatches).
* **sync** -- for replicated State that hooks change (decentralized, or a
  hybrid whose node part reads it): ``store per decision`` (every decision
  reads the shared store, every update writes it: exact, slower) or
  ``sync s`` (push updates and pull the merged State every s seconds:
  allowed only when every such variable is mergeable -- ``+=``/``-=``
  deltas, ``max``/``min``).
* **k** -- decentralized / placement schedulers (default: one per node).

A policy with ``Preempt`` keeps only centralized plans (:data:`PREEMPT_WHY` says why each other
architecture cannot choose a victim; the simulator can still run them, with the approximation it
describes in :mod:`ray_adaptive.sim.plan_preemption`).

:func:`enumerate_plans` returns the plans and, for every combination the IR
rules out, an :class:`Excluded` entry saying why.

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> from ray_adaptive.compiler.analysis import analyze
    >>> plans, excluded = enumerate_plans(analyze(load_policy("drf_lb")), nodes=12)
    >>> [p.name for p in plans][:4]
    ['centralized', 'centralized+power-of-2', 'centralized+heartbeat 10ms', 'decentralized+store per decision']
    >>> len(plans), [e.name for e in excluded]
    (12, [])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from ray_adaptive.compiler.analysis import Analysis
from ray_adaptive.compiler.units import NODE, NONE, TASK, expr_reads
from ray_adaptive.plan import Architecture, LoadKind, LoadView, Plan, Sync, SyncKind

__all__ = ["PlanSpace", "Plan", "Excluded", "enumerate_plans"]


@dataclass(frozen=True)
class PlanSpace:
    """The approximation parameters to enumerate.

    ``sample_d``: power-of-d choices to try; ``heartbeat_s``: heartbeat
    periods; ``sync_s``: periodic-sync periods (``store per decision`` is
    always tried where sync applies); ``schedulers``: k values for
    decentralized and hybrid plans (0: one per node).
    """

    sample_d: tuple[int, ...] = (2,)
    heartbeat_s: tuple[float, ...] = (0.01,)
    sync_s: tuple[float, ...] = (0.1,)
    schedulers: tuple[int, ...] = (0,)
    architectures: tuple[Architecture, ...] = tuple(Architecture)

    def __post_init__(self):
        object.__setattr__(self, "architectures", tuple(Architecture.parse(a) for a in self.architectures))
        if any(d < 1 for d in self.sample_d) or any(k < 0 for k in self.schedulers):
            raise ValueError("sample_d must be >= 1 and schedulers >= 0")
        if any(not (h > 0) for h in (*self.heartbeat_s, *self.sync_s)):
            raise ValueError("heartbeat and sync periods must be > 0 seconds")

    def loads(self, nodes: int) -> list[LoadView]:
        views = [LoadView.probe()]
        views += [LoadView.sample(d) for d in self.sample_d if d < nodes]
        views += [LoadView.cached(h) for h in self.heartbeat_s]
        return views


@dataclass(frozen=True)
class Excluded:
    """A combination the IR does not allow, and why."""

    name: str
    architecture: str
    why: str

    def as_dict(self) -> dict:
        return {"name": self.name, "architecture": self.architecture, "why": self.why}


def _name(arch: str, load: LoadView, sync: Sync, k: int) -> str:
    parts = [arch]
    if k:
        parts.append(f"k={k}")
    if load.kind is not LoadKind.PROBE:
        parts.append(load.label)
    if sync.kind is not SyncKind.EXACT:
        parts.append(sync.label)
    return "+".join(parts)


def _synced(analysis: Analysis, readers: set[str]) -> list:
    """Hook-changed State variables read by ``readers`` (unit ids) or by any hook: what replicas must sync."""
    hook_reads = {v for u in analysis.hook_units for v in u.state_reads}
    return [v for v in analysis.state if v.dynamic and (set(v.readers) & readers or v.name in hook_reads)]


def _syncs(space: PlanSpace, synced: list) -> tuple[list[Sync], Optional[str]]:
    """Sync options for replicas of ``synced``, and why periodic sync is ruled out (if it is)."""
    if not synced:
        return [Sync.exact()], None
    options = [Sync.instant()]
    bad = [v for v in synced if not v.mergeable]
    if bad:
        return options, f"State `{bad[0].name}` is not mergeable ({bad[0].why}), so replicas cannot sync it periodically"
    return options + [Sync.periodic(s) for s in space.sync_s], None


def enumerate_plans(analysis: Analysis, nodes: int, space: PlanSpace = PlanSpace()) -> tuple[list[Plan], list[Excluded]]:
    """Every plan the IR allows in ``space``, and the excluded combinations with the reason."""
    if nodes < 1:
        raise ValueError(f"a cluster needs at least one node, found {nodes}")
    plans: list[Plan] = []
    excluded: list[Excluded] = []
    score_ids = [u.id for u in analysis.score_units]
    hook_ids = [u.id for u in analysis.hook_units]
    loads = space.loads(nodes)
    const = tuple((v.name, "const") for v in analysis.state if not v.dynamic)

    if Architecture.CENTRALIZED in space.architectures:
        placement = tuple((u, "selector") for u in score_ids + hook_ids)
        state = tuple((v.name, "selector") for v in analysis.state if v.dynamic) + const
        for load in loads:
            plans.append(Plan(_name(Architecture.CENTRALIZED, load, Sync.exact(), 0), Architecture.CENTRALIZED, load, Sync.exact(), 0,
                              placement, state))

    if Architecture.DECENTRALIZED in space.architectures:
        synced = _synced(analysis, set(score_ids))
        syncs, why = _syncs(space, synced)
        placement = tuple((u, "schedulers") for u in score_ids + hook_ids)
        state = tuple((v.name, "replicas") for v in analysis.state if v.dynamic) + const
        for k in space.schedulers:
            for sync in syncs:
                for load in loads:
                    plans.append(Plan(_name(Architecture.DECENTRALIZED, load, sync, k), Architecture.DECENTRALIZED, load, sync, k, placement, state))
            if why:
                excluded += [Excluded(_name(Architecture.DECENTRALIZED, LoadView.probe(), Sync.periodic(s), k), Architecture.DECENTRALIZED, why)
                             for s in space.sync_s]

    if Architecture.HYBRID in space.architectures:
        plans_h, excluded_h = _hybrid(analysis, space, loads, const)
        plans += plans_h
        excluded += excluded_h
    if analysis.policy.preempt is not None:
        return _preempting(plans, excluded, nodes)
    return plans, excluded


#: Why a plan of each architecture cannot run a policy's Preempt as the ideal scheduler does (docs/compiler.md,
#: Preemption): a victim choice needs the waiting tasks and the running tasks of every node in one place.
PREEMPT_WHY = {
    Architecture.DECENTRALIZED: ("each of its {k} schedulers sees only the running tasks it placed (~1/{k} of them): "
                                 "a waiting task finds the policy's victim ~1/{k} of the time, never one another "
                                 "scheduler placed"),
    Architecture.HYBRID: ("its selector holds the waiting tasks but not where tasks run, its placement schedulers "
                          "the reverse: no role can choose a victim"),
}


def _preempting(plans: list[Plan], excluded: list[Excluded], nodes: int) -> tuple[list[Plan], list[Excluded]]:
    """A policy that preempts: only centralized plans choose victims as the ideal scheduler does (the
    selector placed every task and is told of every finish); the others are excluded, saying why."""
    kept = [p for p in plans if p.architecture is Architecture.CENTRALIZED]
    for p in plans:
        if p.architecture is not Architecture.CENTRALIZED:
            why = PREEMPT_WHY[p.architecture].format(k=p.schedulers or nodes)
            excluded.append(Excluded(p.name, p.architecture, f"the policy preempts, and {why}"))
    return kept, excluded


def _hybrid(analysis: Analysis, space: PlanSpace, loads: Sequence[LoadView], const) -> tuple[list[Plan], list[Excluded]]:
    sep = analysis.separability
    if not sep.separable:
        return [], [Excluded("hybrid", Architecture.HYBRID, f"Score is not separable: {sep.why}")]
    placement = []
    task_side, node_side = set(), set()
    for u in analysis.score_units:
        if u.side in (TASK, NONE):
            where = "selector"
            task_side.add(u.id)
        elif u.side == NODE:
            where = "schedulers"
            node_side.add(u.id)
        else:  # the joint return of a separable Score: its task part on the selector, node part on the schedulers
            where = "selector+schedulers"
        placement.append((u.id, where))
    def reads(expr):  # the State a part reads, locals inlined
        return {a.name for a in expr_reads(expr) if a.kind == "state"} if expr is not None else set()

    if sep.form in ("task-only", "constant"):
        task_vars, node_vars = {v for u in analysis.score_units for v in u.state_reads}, set()
    elif sep.form == "node-only":
        task_vars, node_vars = set(), {v for u in analysis.score_units for v in u.state_reads}
    else:
        task_vars, node_vars = reads(sep.task_expr), reads(sep.node_expr)
    dynamic = {v.name: v for v in analysis.state if v.dynamic}
    # the selector keeps what the task part reads and what Score does not read at all
    selector_vars = task_vars | (set(dynamic) - node_vars)
    for u in analysis.hook_units:
        written = set(u.state_writes) & selector_vars
        if written and u.side not in (TASK, NONE):
            name = sorted(written)[0]
            kept = "the task part reads" if name in task_vars else "only the selector keeps"
            return [], [Excluded("hybrid", Architecture.HYBRID, (
                f"{u.id} `{u.text}` changes `{name}`, which {kept}, from the node; "
                "the selector runs hooks when it forwards a task, before the node is known"))]
    for u in analysis.hook_units:
        if u.side not in (TASK, NONE):  # reads the node: only a placement scheduler knows it
            where = "schedulers"
        elif set(u.state_writes) & node_vars & set(dynamic):
            where = "selector+schedulers"
        else:
            where = "selector"
        placement.append((u.id, where))
    node_dynamic = [dynamic[v] for v in sorted(node_vars) if v in dynamic]
    syncs, why = _syncs(space, node_dynamic)
    state = []
    for v in analysis.state:
        if not v.dynamic:
            continue
        where = []
        if v.name in task_vars or v.name not in node_vars:
            where.append("selector")
        if v.name in node_vars:
            where.append("replicas")
        state.append((v.name, "+".join(where)))
    plans = []
    for k in space.schedulers:
        for sync in syncs:
            for load in loads:
                plans.append(Plan(_name(Architecture.HYBRID, load, sync, k), Architecture.HYBRID, load, sync, k, tuple(placement),
                                  tuple(state) + const))
    excluded = []
    if why:
        excluded = [Excluded(_name(Architecture.HYBRID, LoadView.probe(), Sync.periodic(s), k), Architecture.HYBRID, why)
                    for k in space.schedulers for s in space.sync_s]
    return plans, excluded
