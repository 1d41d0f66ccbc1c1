"""The owner of a policy's runtime: the process that builds its actors and slots, switches its plan, runs its
controller and watches its jobs -- a driver (``ra.start``) or the policy service (``ra.start(detached=True)``).

:func:`own` builds a runtime from options :func:`ray_adaptive.api.lifecycle.start` has checked;
:func:`attached` is any process's side of one (the owner's too): a router with that process's decider.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Sequence, Tuple

import ray

from ray_adaptive._private.autoscaler import launchable_node_types
from ray_adaptive.api.cluster import alive_node_ids, policy_nodes
from ray_adaptive.api.runtime import PolicyRuntime
from ray_adaptive.control import EstimateTable, Settings
from ray_adaptive.control_loop import ControlLoop
from ray_adaptive.dsl.ir import Policy
from ray_adaptive.monitor import Monitor
from ray_adaptive.plan.holding import resolve_hold
from ray_adaptive.plan.room import slots_of
from ray_adaptive.runtime import background
from ray_adaptive.runtime.binding import SlotBinding
from ray_adaptive.runtime.job_watch import JobWatch
from ray_adaptive.runtime.demand import DemandReporter
from ray_adaptive.runtime.node_watch import NodeWatch
from ray_adaptive.runtime.messages import new_client_id
from ray_adaptive.runtime.router import Router
from ray_adaptive.runtime.topology import Topology, build
from ray_adaptive.workload.specs import TaskSpec

if TYPE_CHECKING:
    from ray_adaptive.compiler import Analysis

__all__ = ["Adaptive", "Options", "own", "attached"]


@dataclass(frozen=True)
class Adaptive:
    """``plan="adaptive"``'s settings: the controller's, and how its first estimate table is had."""

    settings: Settings
    fractions: Optional[Tuple[float, ...]] = None
    initial: Any = "auto"
    trace: Optional[Sequence[TaskSpec]] = None
    table: Optional[EstimateTable] = None


@dataclass(frozen=True)
class Options:
    """What :func:`~ray_adaptive.api.lifecycle.start` was given, checked (see its docstring)."""

    plan: Any = "auto"
    rate: Optional[float] = None
    executors: Optional[int] = None
    queue: int = 2
    node_fields: Optional[Mapping[str, Mapping[str, Any]]] = None
    group_by: Optional[str] = None
    metrics_every_s: Optional[float] = 5.0
    profile: Any = None
    decision_records: int = 1000
    hold: str = "auto"
    adapt: Optional[Adaptive] = None
    bind: Optional[Dict[str, str]] = None  # Task field -> job / metadata:KEY (see ray_adaptive.runtime.tenancy)


def own(p: Policy, o: Options, detached: bool = False) -> PolicyRuntime:
    """Build ``p``'s runtime on the connected cluster, owned by this process: its actors (``detached``: owned
    by no process, as the policy service's are), its slot resources, its controller, its watch over jobs."""
    # (the compiler -- and the simulator it stands on -- is imported only where a plan is chosen: a
    # process that joins a runtime, a task submitting policy tasks, never pays for it)
    from ray_adaptive.compiler import analyze, lower, select_plan

    nodes = policy_nodes(p, o.executors, o.queue, o.node_fields if o.node_fields is not None else {})  # (checked there)
    if o.adapt is not None and o.adapt.table is not None:
        _check_table(o.adapt.table, p.name, sum(1 for n in nodes if n.runs_tasks))  # (as the compiler counts)
    analysis = analyze(p)
    if not any(n.runs_tasks for n in nodes):
        raise RuntimeError(f"policy {p.name!r}: no node of the cluster has a CPU to run a task on "
                           f"({len(nodes)} node(s), each with 0 CPUs); start a worker node with CPUs (ray start "
                           f"--address ... --num-cpus N), or an autoscaler with min_workers >= 1, first")
    chosen, why = select_plan(p, o.plan if o.adapt is None else o.adapt.initial, cluster=nodes, queue=o.queue,
                              rate=o.rate, profile=o.profile, analysis=analysis)
    lowered = lower(chosen, analysis)
    autoscaled = launchable_node_types() is not None
    if o.hold == "auto" and autoscaled:
        # (tasks Ray holds behind a slot ask for the slot, which no node type has: only what the policy
        # holds reaches the autoscaler, as demand -- see ray_adaptive.runtime.demand)
        overflow, holding = False, "the scheduler holds tasks: an autoscaler may add nodes, and it sees the demand the policy holds"
    else:
        overflow, holding = resolve_hold(o.hold, lowered.split)
    binding = SlotBinding(p.name, {n.id: slots_of(n.executors, n.queue) for n in nodes})
    topology = None
    try:
        slots = {node: slot.resource for node, slot in binding.slots.items()}
        topology = build(lowered, nodes, slots, ray.get_runtime_context().get_node_id(), o.decision_records,
                         overflow, detached=detached, bind=o.bind)
        client = new_client_id()
        ray.get(topology.store.join.remote(client, job=ray.get_runtime_context().get_job_id()))
        rt = attached(p, analysis, why, topology, client, o.group_by, o.metrics_every_s, binding)
        rt.holding = holding
        rt.publish_info(group_by=o.group_by, owner=client)  # (status leaves the owner's own process out)
        if o.adapt is not None:
            rt.control_loop = _control_loop(rt, o.adapt, o.profile)
        rt.jobs = JobWatch(topology.store, client, rt.evict, p.name, late=rt.rebuild_late)
        rt.node_options = (o.executors, o.queue)
        rt.nodes = NodeWatch(rt.follow_cluster, p.name)
        rt.demand = DemandReporter(topology.store, p.name)
    except BaseException:
        if topology is not None:
            topology.close()
        binding.close()
        raise
    return rt


def _check_table(table: Any, policy: str, nodes: int) -> None:
    """A first estimate table given to ``start()`` is one for this policy and cluster."""
    if not isinstance(table, EstimateTable):
        raise TypeError(f"table= must be an EstimateTable (ray_adaptive.compiler.estimate_table), "
                        f"found {type(table).__name__}")
    if table.policy != policy or table.nodes != nodes:
        raise ValueError(f"table= was computed for policy {table.policy!r} on {table.nodes} nodes; this runtime "
                         f"runs {policy!r} on {nodes}")


def _control_loop(rt: PolicyRuntime, adapt: Adaptive, profile: Any) -> ControlLoop:
    """Start the adaptive loop of ``rt``; its estimate tables are computed by a Ray task (``num_cpus=0``):
    seconds of replays in this process would hold its GIL against the callers' submissions. The first
    table is ``adapt.table``, or computed on ``adapt.trace`` (None: the compiler's default workload for
    the policy); later ones on the recorded workload, on the first table's grid of rates."""
    from ray_adaptive.compiler import estimate_table  # (see own: the compiler where plans are chosen only)

    fractions = adapt.fractions
    if adapt.table is not None:
        fractions = tuple(r / adapt.table.capacity for r in adapt.table.rates)
    extra = {"fractions": fractions} if fractions else {}
    compute: Any = ray.remote(num_cpus=0, max_retries=1)(estimate_table)

    def live() -> list:
        """The nodes of the plan in force that run tasks, now (``rt.topology`` is replaced at each switch,
        and nodes join and leave by a switch)."""
        return [n for n in rt.topology.nodes if n.alive and n.executors > 0]

    def table_for(trace: Optional[Sequence[TaskSpec]], cluster: Optional[Sequence[Any]] = None) -> EstimateTable:
        trace = adapt.trace if trace is None else trace  # (None: the first table; later, the recorded workload)
        nodes = live() if cluster is None else cluster
        shape = [{"executors": n.executors, "queue": n.queue} for n in nodes]  # (each node its own executors)
        return background.get(compute.remote(rt.policy, cluster=shape, trace=trace, profile=profile, workers=1,
                                             **extra))

    return ControlLoop(rt, adapt.settings, table_for, adapt.table, cluster=live)


def attached(p: Policy, analysis: "Optional[Analysis]", why: str, topology: Topology, client: str,
             group_by: Optional[str], metrics_every_s: Optional[float],
             binding: Optional[SlotBinding] = None) -> PolicyRuntime:
    """This process's side of a running topology: a router with this process's decider, and the values the
    operator bound Task fields to for this process's job."""
    on_dead = None
    if binding is not None:  # the owner moves a dead node's slot to a live node
        def on_dead(node_id: str) -> None:
            alive = alive_node_ids()
            hosts = [n for n, slot in binding.slots.items() if n in alive and slot.capacity > 0]
            if hosts:
                binding.rehome(node_id, min(hosts, key=lambda h: router.outstanding().get(h, 0)))

    bound = ray.get(topology.store.bound_for.remote(ray.get_runtime_context().get_job_id()), timeout=30)
    # a caller waiting for room wakes after this many finishes: before a node's queue can run dry
    wake_after = max(1, min(n.queue for n in topology.nodes) // 2)
    router = Router(p, topology, client=client, alive_nodes=alive_node_ids, on_dead=on_dead,
                    monitor=Monitor(p.name, group_by), metrics_every_s=metrics_every_s, wake_after=wake_after)
    router.addable_node_types = launchable_node_types  # (asked only for a task no live node can hold)
    return PolicyRuntime(p, analysis, why, router, binding, bound=bound)
