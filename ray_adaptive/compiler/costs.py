"""The latency model: what each role of a plan is charged per task (paper, Section 5.2).

A task is *received*, *decided* (its Score units, with the probes of the
plan's load view), *sent*; its finish comes back as a notification to the
role whose State OnFinish changes. Hooks run with the message that
triggers them. Each step's seconds come from the :class:`~ray_adaptive.compiler.profile.Profile`:
the measured compute of the execution units placed on the role, plus the
modelled messages, probes, store accesses, heartbeats and syncs.

The simulator charges these same costs as scheduler busy time
(:class:`~ray_adaptive.plan.lowered.RoleCosts`), so estimated throughput and
simulated goodput agree where a scheduler is the bottleneck.
"""

from __future__ import annotations

from dataclasses import dataclass

from ray_adaptive.compiler.profile import Profile
from ray_adaptive.compiler.analysis import Analysis
from ray_adaptive.compiler.units import NODE, NONE, TASK
from ray_adaptive.plan import Architecture, LoadKind, Plan, Role, RoleCosts, SyncKind

__all__ = ["Step", "role_costs"]


@dataclass(frozen=True)
class Step:
    """One contribution to a plan's latency: ``seconds`` of ``role`` time per task."""

    role: Role
    what: str
    seconds: float

    def as_dict(self) -> dict:
        return {"role": self.role.value, "what": self.what, "seconds": round(self.seconds, 9)}


def _hook_units(analysis: Analysis, name: str) -> list[str]:
    return [u.id for u in analysis.hook_units if u.function == name]


def _hook_writes(analysis: Analysis, name: str, vars_: set[str]) -> bool:
    return any(set(u.state_writes) & vars_ for u in analysis.hook_units if u.function == name)


def _score_split(analysis: Analysis) -> tuple[list[str], list[str], list[str]]:
    """Score unit ids: (task side, node side, joint)."""
    task, node, joint = [], [], []
    for u in analysis.score_units:
        (task if u.side in (TASK, NONE) else node if u.side == NODE else joint).append(u.id)
    return task, node, joint


def role_costs(analysis: Analysis, profile: Profile, plan: Plan, nodes: int, role: Role) -> tuple[RoleCosts, list[Step], float]:
    """What one scheduler of ``role`` is charged, its per-task steps, and its periodic busy fraction."""
    arch = plan.architecture
    # a decentralized scheduler lives in its submitter's process: its hops are calls there (Profile.local_s);
    # a hybrid's placement scheduler hears from its selector alone (Profile.hop_s: batched on Ray)
    m = (profile.local_s if arch is Architecture.DECENTRALIZED
         else profile.hop_s if arch is Architecture.HYBRID and role is Role.SCHEDULERS else profile.message_s)
    task_ids, node_ids, joint_ids = _score_split(analysis)
    has_finish = bool(_hook_units(analysis, "OnFinish"))
    steps: list[Step] = []
    if arch is Architecture.HYBRID and role is Role.SELECTOR:
        compute_ids, decides = task_ids + joint_ids, False
        hooks, finish_needed = ("OnArrival", "OnDispatch", "OnFinish"), True  # slot accounting needs finishes
        send_what = "forward to a placement scheduler"
    elif arch is Architecture.HYBRID:
        compute_ids, decides = node_ids + joint_ids, True
        hooks = ("OnDispatch", "OnFinish") if plan.sync.kind is not SyncKind.EXACT else ()
        finish_needed = has_finish and plan.sync.kind is not SyncKind.EXACT
        send_what = "send to the node"
    else:
        compute_ids, decides = task_ids + node_ids + joint_ids, True
        hooks, finish_needed = ("OnArrival", "OnDispatch", "OnFinish"), has_finish
        send_what = "send to the node"
    units = {u.id: u for u in analysis.units}
    order = {u.id: i for i, u in enumerate(analysis.units)}  # (a dict: list.index made 10,000 units quadratic)
    compute_ids = sorted(compute_ids, key=order.__getitem__)
    synced = {v for v, where in plan.state if "replicas" in where}
    instant = plan.sync.kind is SyncKind.INSTANT and role is Role.SCHEDULERS
    store = profile.store_s

    # a selector receives from the submitters (Profile.arrival_s); a hybrid's placement scheduler from it
    first = m if arch is Architecture.DECENTRALIZED or role is Role.SCHEDULERS else profile.arrival_s
    recv = first + profile.compute(_hook_units(analysis, "OnArrival") if "OnArrival" in hooks else [])
    steps.append(Step(role, "receive the task" + (" + OnArrival" if "OnArrival" in hooks and _hook_units(analysis, "OnArrival") else ""), recv))
    compute = 0.0
    for uid in compute_ids:
        c = profile.compute([uid])
        compute += c
        steps.append(Step(role, f"{uid} {units[uid].label}", c))
    if instant:
        compute += store
        steps.append(Step(role, "read State from the store", store))
    probes = plan.load.probes(nodes) if decides else 0
    if probes:
        steps.append(Step(role, f"probe {probes} node{'s' if probes > 1 else ''}", probes * profile.probe_s))
    send = m + profile.compute(_hook_units(analysis, "OnDispatch") if "OnDispatch" in hooks else [])
    if instant and _hook_writes(analysis, "OnDispatch", synced):
        send += store
    steps.append(Step(role, send_what + (" + OnDispatch" if "OnDispatch" in hooks and _hook_units(analysis, "OnDispatch") else ""), send))
    finish = 0.0
    if finish_needed:
        finish = m + profile.compute(_hook_units(analysis, "OnFinish") if "OnFinish" in hooks else [])
        if instant and _hook_writes(analysis, "OnFinish", synced):
            finish += store
        steps.append(Step(role, "finish notification" + (" + OnFinish" if "OnFinish" in hooks and has_finish else ""), finish))
    heartbeat = nodes * profile.heartbeat_s if plan.load.kind is LoadKind.CACHED and decides else 0.0
    sync = 2 * store if plan.sync.kind is SyncKind.PERIODIC and role is Role.SCHEDULERS else 0.0
    periodic = (heartbeat / plan.load.period_s if heartbeat else 0.0) + (sync / plan.sync.period_s if sync else 0.0)
    costs = RoleCosts(recv_s=recv, send_s=send, finish_s=finish, compute_s=compute,
                      probe_s=profile.probe_s if decides else 0.0, sync_s=sync, heartbeat_s=heartbeat)
    return costs, steps, periodic
