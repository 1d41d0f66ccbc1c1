"""Starting, joining and stopping a policy's runtime; the runtimes this process knows, by policy name."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Sequence, Tuple

import ray

from ray_adaptive.api.cluster import alive_node_ids, policy_nodes
from ray_adaptive.api.runtime import PolicyRuntime
from ray_adaptive.control import EstimateTable, Settings
from ray_adaptive.control_loop import ControlLoop
from ray_adaptive.dsl import load_policy
from ray_adaptive.dsl.ir import Policy
from ray_adaptive.monitor import Monitor
from ray_adaptive.plan.holding import HOLDS, resolve_hold
from ray_adaptive.plan.room import slots_of
from ray_adaptive.runtime.binding import SlotBinding
from ray_adaptive.runtime.messages import new_client_id
from ray_adaptive.runtime.router import Router
from ray_adaptive.runtime.topology import Topology, build, join
from ray_adaptive.workload.specs import TaskSpec

if TYPE_CHECKING:
    from ray_adaptive.compiler import Analysis

__all__ = ["start", "shutdown", "runtime_of", "registered"]

_lock = threading.Lock()
_runtimes: Dict[str, PolicyRuntime] = {}

_ADAPTIVE_OPTIONS = ("fractions", "initial", "trace", "table")


def registered(name: str) -> Optional[PolicyRuntime]:
    """The runtime of policy ``name`` this process started or joined, if any (a dict read: no lock)."""
    return _runtimes.get(name)


@dataclass(frozen=True)
class _Adaptive:
    """``plan="adaptive"``'s settings: the controller's, and how its first estimate table is had."""

    settings: Settings
    fractions: Optional[Tuple[float, ...]] = None
    initial: Any = "auto"
    trace: Optional[Sequence[TaskSpec]] = None
    table: Optional[EstimateTable] = None


def start(policy: "str | Policy", plan: Any = "auto", *, rate: Optional[float] = None,
          executors: Optional[int] = None, queue: int = 2,
          node_fields: Optional[Mapping[str, Mapping[str, Any]]] = None, group_by: Optional[str] = None,
          metrics_every_s: Optional[float] = 5.0, profile: Any = None, decision_records: int = 1000,
          hold: str = "auto", **adaptive: Any) -> PolicyRuntime:
    """Run ``policy`` (a shipped name, a path, or a parsed Policy) on the connected cluster.

    Args:
        plan: how decisions are made (see :func:`ray_adaptive.compiler.select_plan`):
            ``"auto"`` (the compiler's choice for this cluster at ``rate``),
            ``"centralized"`` (a selector actor), ``"decentralized"`` (each
            submitting process decides, State synced through a store actor),
            ``"hybrid"`` (the selector picks the task, placement actors on the
            nodes pick the node), any plan name ``ray-adaptive compile`` lists,
            or a plan file (path or dict); or ``"adaptive"``: the compiler's
            choice at first, then whatever plan fits the measured load, switched
            live (see :mod:`ray_adaptive.control_loop` and docs/adaptive.md).
        rate: the arrival rate (tasks/s) ``"auto"`` (and ``"adaptive"``, at first) compiles for
            (default: the cluster's execution bound, where plans differ most).
        executors: tasks each node runs at once (default: its CPU count).
        queue: tasks each node may hold waiting besides those running.
        node_fields: node id -> values of the policy's ``Node:`` fields. A scalar field
            not given here is read from the node's Ray label of the same name
            (``ray start --labels zone=us-a``), converted to the field's type.
        group_by: the Task field the monitor groups figures by (default:
            ``tenant`` when the policy has one).
        metrics_every_s: how often the monitor sets the Ray metrics
            (``ray_adaptive_*``); None: never.
        decision_records: how many recent decisions each scheduler keeps, each with its scores on
            every candidate node, to answer :meth:`PolicyRuntime.why_placed` (0: none).
        profile: the compiler's latency model (a :class:`~ray_adaptive.compiler.Profile`) for
            ``"auto"`` and ``"adaptive"``: calibrate it to the cluster's message latencies.
        hold: who holds tasks while every node is full. ``"caller"``: the policy's scheduler,
            until a node has room (the cluster model; ``.remote()`` waits meanwhile);
            ``"ray"``: Ray's queue, behind the node's slot resource -- the task is decided at once
            (a task with ``deadline_s`` still waits for room); ``"auto"``: ``"ray"`` when the
            policy provably decides alike either way (Score reads no task and strictly increases
            with the node's load, as least_loaded), else ``"caller"``. ``rt.holding`` says which
            and why (see :mod:`ray_adaptive.plan.holding`).
        adaptive: with ``plan="adaptive"``, the controller's settings (``every_s``, ``window_s``,
            ``margin``, ``consecutive``, ``dwell_s``, ``switch_cost_s``, ``horizon_s``,
            ``prefer_cheaper``: see :class:`ray_adaptive.control.Settings`), ``fractions`` (the
            estimate grid's rates, as fractions of the cluster's execution bound), ``initial``
            (the plan to start with, any plan this function takes; default ``"auto"``) and
            ``trace`` (task specs of the expected workload: the first estimate table is computed
            on it rather than on the compiler's default workload, so the controller's rates and
            durations are right from the start; later tables, on the recorded workload) or ``table``
            (that first table itself, from :func:`ray_adaptive.compiler.estimate_table` for this
            policy and cluster: the controller starts at once, with no compile; later tables on
            its grid of rates).

    Example::

        rt = ra.start("least_loaded", plan="centralized", queue=1)
        ...
        ra.shutdown()
    """
    # (the compiler -- and the simulator it stands on -- is imported only where a plan is chosen: a
    # process that joins a runtime, a task submitting policy tasks, never pays for it)
    from ray_adaptive.compiler import analyze, lower, select_plan

    p = policy if isinstance(policy, Policy) else load_policy(policy)
    _check_options(executors, queue, hold, rate, metrics_every_s, decision_records)
    group_by = _group_by(p, group_by)
    adapt = _adaptive_settings(plan, adaptive)
    with _lock:
        if p.name in _runtimes:
            raise ValueError(f"policy {p.name!r} is already running; call ra.shutdown({p.name!r}) first")
        nodes = policy_nodes(p, executors, queue, dict(node_fields or {}))
        if adapt is not None and adapt.table is not None:
            _check_table(adapt.table, p.name, len(nodes))
        analysis = analyze(p)
        chosen, why = select_plan(p, plan if adapt is None else adapt.initial, nodes=len(nodes),
                                  executors=nodes[0].executors, queue=queue, rate=rate, profile=profile,
                                  analysis=analysis)
        lowered = lower(chosen, analysis)
        overflow, holding = resolve_hold(hold, lowered.split)
        binding = SlotBinding(p.name, {n.id: slots_of(n.executors, n.queue) for n in nodes})
        topology = None
        try:
            slots = {node: slot.resource for node, slot in binding.slots.items()}
            topology = build(lowered, nodes, slots, ray.get_runtime_context().get_node_id(), decision_records,
                             overflow)
            client = new_client_id()
            ray.get(topology.store.join.remote(client))
            rt = _runtime(p, analysis, why, topology, client, group_by, metrics_every_s, binding)
            rt.holding = holding
            rt.publish_info(group_by=group_by)
            if adapt is not None:
                rt.control_loop = _control_loop(rt, adapt, profile)
        except BaseException:
            if topology is not None:
                topology.close()
            binding.close()
            raise
        _runtimes[p.name] = rt
        return rt


def _check_options(executors: Optional[int], queue: int, hold: str, rate: Optional[float],
                   metrics_every_s: Optional[float], decision_records: int) -> None:
    """:func:`start`'s options, each refused with a message naming the bad value."""
    if executors is not None and (not isinstance(executors, int) or executors < 1):
        raise ValueError(f"executors must be a positive int, got {executors!r}")
    if not isinstance(queue, int) or queue < 0:
        raise ValueError(f"queue must be a non-negative int, got {queue!r}")
    if hold not in HOLDS:
        raise ValueError(f"hold must be one of {', '.join(map(repr, HOLDS))}, got {hold!r}")
    if rate is not None and not (isinstance(rate, (int, float)) and rate > 0):
        raise ValueError(f"rate must be a positive number of tasks/s, got {rate!r}")
    if metrics_every_s is not None and not metrics_every_s > 0:
        raise ValueError(f"metrics_every_s must be > 0 seconds or None, got {metrics_every_s!r}")
    if isinstance(decision_records, bool) or not isinstance(decision_records, int) or decision_records < 0:
        raise ValueError(f"decision_records must be an int >= 0, got {decision_records!r}")


def _group_by(p: Policy, group_by: Optional[str]) -> Optional[str]:
    task_fields = [f.name for f in p.task_fields]
    if group_by is None and "tenant" in task_fields:
        group_by = "tenant"
    if group_by is not None and group_by not in task_fields:
        raise ValueError(f"group_by={group_by!r} is not a Task field of policy {p.name!r} ({', '.join(task_fields) or 'none'})")
    return group_by


def _adaptive_settings(plan: Any, adaptive: Dict[str, Any]) -> Optional[_Adaptive]:
    """The controller's settings and first table for ``plan="adaptive"`` (else None)."""
    if plan != "adaptive":
        if adaptive:
            raise TypeError(f"start() got controller settings {sorted(adaptive)} but plan={plan!r}; they are for "
                            f"plan='adaptive'")
        return None
    extra = {k: adaptive.pop(k) for k in _ADAPTIVE_OPTIONS if k in adaptive}
    known = set(Settings.__dataclass_fields__)
    unknown = sorted(set(adaptive) - known)
    if unknown:
        raise TypeError(f"start() got unknown keyword arguments {unknown}; plan='adaptive' takes: "
                        f"{', '.join(sorted(known | set(_ADAPTIVE_OPTIONS)))}")
    trace = extra.get("trace")
    if trace is not None and (isinstance(trace, (str, bytes)) or len(trace) < 10):  # (estimate_table's floor)
        raise ValueError("trace= must be a sequence of at least 10 task specs (ray_adaptive.workload.specs.TaskSpec)")
    if "table" in extra and ("trace" in extra or "fractions" in extra):
        raise TypeError("start() got table= with trace= or fractions=; they compute the first table: give one or the other")
    fractions = extra.get("fractions")
    return _Adaptive(Settings(**adaptive), tuple(fractions) if fractions else None, extra.get("initial", "auto"),
                     trace, extra.get("table"))


def _check_table(table: Any, policy: str, nodes: int) -> None:
    """A first estimate table given to ``start()`` is one for this policy and cluster."""
    if not isinstance(table, EstimateTable):
        raise TypeError(f"table= must be an EstimateTable (ray_adaptive.compiler.estimate_table), "
                        f"found {type(table).__name__}")
    if table.policy != policy or table.nodes != nodes:
        raise ValueError(f"table= was computed for policy {table.policy!r} on {table.nodes} nodes; this runtime "
                         f"runs {policy!r} on {nodes}")


def _control_loop(rt: PolicyRuntime, adapt: _Adaptive, profile: Any) -> ControlLoop:
    """Start the adaptive loop of ``rt``; its estimate tables are computed by a Ray task (``num_cpus=0``):
    seconds of replays in this process would hold its GIL against the callers' submissions. The first
    table is ``adapt.table``, or computed on ``adapt.trace`` (None: the compiler's default workload for
    the policy); later ones on the recorded workload, on the first table's grid of rates."""
    from ray_adaptive.compiler import estimate_table  # (see start: the compiler where plans are chosen only)

    n = rt.topology.nodes
    fractions = adapt.fractions
    if adapt.table is not None:
        fractions = tuple(r / adapt.table.capacity for r in adapt.table.rates)
    extra = {"fractions": fractions} if fractions else {}
    compute: Any = ray.remote(num_cpus=0, max_retries=1)(estimate_table)  # type: ignore[arg-type]  # (Ray's stubs)

    def table_for(trace: Optional[Sequence[TaskSpec]]) -> EstimateTable:
        trace = adapt.trace if trace is None else trace  # (None: the first table; later, the recorded workload)
        return ray.get(compute.remote(rt.policy, nodes=len(n), executors=n[0].executors, queue=n[0].queue,
                                      trace=trace, profile=profile, workers=1, **extra))

    return ControlLoop(rt, adapt.settings, table_for, adapt.table)


def _runtime(p: Policy, analysis: "Optional[Analysis]", why: str, topology: Topology, client: str, group_by: Optional[str],
             metrics_every_s: Optional[float], binding: Optional[SlotBinding] = None) -> PolicyRuntime:
    """This process's side of a running topology: a router with this process's decider."""
    on_dead = None
    if binding is not None:  # the starting process moves a dead node's slot to a live node
        def on_dead(node_id: str) -> None:
            alive = alive_node_ids()
            hosts = [n for n in binding.slots if n in alive]
            if hosts:
                binding.rehome(node_id, min(hosts, key=lambda h: router.outstanding().get(h, 0)))

    # a caller waiting for room wakes after this many finishes: before a node's queue can run dry
    wake_after = max(1, min(n.queue for n in topology.nodes) // 2)
    router = Router(p, topology, client=client, alive_nodes=alive_node_ids, on_dead=on_dead,
                    monitor=Monitor(p.name, group_by), metrics_every_s=metrics_every_s, wake_after=wake_after)
    return PolicyRuntime(p, analysis, why, router, binding)


def runtime_of(name: str) -> PolicyRuntime:
    """The runtime of policy ``name`` in this process; joins one another process started
    (a task or actor submitting policy tasks) on first use."""
    with _lock:
        rt = _runtimes.get(name)
        if rt is None:
            rt = _join(name)
    if rt is None:
        running = ", ".join(sorted(_runtimes)) or "none"
        raise RuntimeError(f"policy {name!r} is not running: call ra.start({name!r}) first (running here: {running})")
    return rt


def _join(name: str) -> Optional[PolicyRuntime]:
    """Holds _lock."""
    if not ray.is_initialized():
        return None
    client = new_client_id()
    topology = join(name, client)
    if topology is None:
        return None
    p = topology.plan.policy
    rt = _runtime(p, None, "joined", topology, client, _group_by(p, None), 5.0)
    _runtimes[name] = rt
    return rt


def shutdown(name: Optional[str] = None) -> None:
    """Stop one policy's runtime (or all): undecided tasks are cancelled; the starting process
    also removes the actors and slots."""
    with _lock:
        names = [name] if name is not None else list(_runtimes)
        targets = [_runtimes.pop(n) for n in names if n in _runtimes]
    for rt in targets:
        rt.shutdown()
