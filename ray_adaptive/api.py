"""The user API: run a policy on a Ray cluster and submit policy-decorated tasks.

Example (inside a connected Ray driver)::

    import ray, ray_adaptive as ra

    ra.start("drf_lb")

    @ra.policy("drf_lb")
    @ray.remote(num_cpus=1)
    def work(x):
        return x * 2

    ref = work.options(task={"tenant": "a", "resource_vec": [1, .5, 0]}).remote(21)
    assert ray.get(ref) == 42
    ra.shutdown()

``.remote()`` returns a real ``ray.ObjectRef`` owned by the caller, once the
policy has placed the task: immediately while some node has room, otherwise
after one frees (backpressure). ``.submit()`` returns at once with a
``concurrent.futures.Future`` of that ObjectRef, so one thread can keep a
backlog for the policy to order.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from ray_adaptive._private.submit import launcher
from ray_adaptive.dsl import load_policy
from ray_adaptive.dsl.ir import Policy, field_problem

__all__ = ["start", "shutdown", "policy", "PolicyRuntime", "PolicyFunction", "runtime_of"]

# Options that would take placement away from the policy.
_PLACEMENT_OPTIONS = ("scheduling_strategy", "placement_group", "placement_group_bundle_index",
                      "placement_group_capture_child_tasks")

_lock = threading.Lock()
_runtimes: Dict[str, "PolicyRuntime"] = {}
log = logging.getLogger("ray_adaptive")


@dataclass
class PolicyRuntime:
    """A policy running on the connected cluster (see :func:`start`), as this process sees it.

    ``binding`` is None in a process that joined a runtime another one started.
    ``plan`` / ``why``: the plan in force (a :class:`~ray_adaptive.plan.Plan`) and why it was
    chosen; ``history``: every live switch this process made (see :meth:`switch`); ``holding``:
    who holds tasks while every node is full, and why (``hold=`` of :func:`start`).
    """

    policy: Policy
    plan: Any  # the compiler's Plan
    why: str
    router: Any
    binding: Any = None
    control_loop: Any = None  # plan="adaptive": the controller's loop (ray_adaptive.control_loop)
    holding: str = ""
    _history: list = field(default_factory=list, repr=False)
    _switching: Any = field(default_factory=threading.Lock, repr=False)
    _owned: Any = field(default=None, repr=False)  # the topology this process built last (it owns its actors)

    @property
    def topology(self):
        """The plan in force's actors, as this process's router follows them."""
        return self.router.topology

    @property
    def name(self) -> str:
        return self.policy.name

    @property
    def slots(self) -> Dict[str, str]:
        return self.topology.slots

    @property
    def monitor(self):
        """The :class:`~ray_adaptive.monitor.Monitor` of this process's submissions."""
        return self.router.monitor

    def stats(self) -> dict:
        """Counts so far (this process's submissions) and decision latency percentiles (seconds)."""
        from ray_adaptive.monitor import percentiles

        s = self.router.stats
        p50, p99 = percentiles(self.router.decision_latencies(), (0.5, 0.99))
        return {"plan": self.plan.name, "architecture": self.plan.architecture,
                "held_by": "ray" if self.topology.overflow else "caller", "submitted": s.submitted,
                "dispatched": s.dispatched, "finished": s.finished, "dropped": s.dropped,
                "pending": self.router.pending, "decision_p50_s": p50, "decision_p99_s": p99}

    def export(self) -> dict:
        """Queues and State of every scheduler this process can reach: what a replacing plan needs."""
        return {"plan": self.plan.name, "caller": self.router.export(), **self.topology.export()}

    @property
    def history(self) -> List[dict]:
        """Every live switch made from this process: when, from, to, why, the estimates that decided it,
        how long processes were frozen (``freeze_s``) and the pause this process's callers saw
        (``pause_s``: its last decision under the old plan to its first under the new; None while
        no task waited for it)."""
        pauses = dict(self.router.pauses)
        return [{**e, "pause_s": pauses.get(e["generation"])} for e in self._history]

    @property
    def evaluations(self) -> list:
        """The adaptive controller's recent verdicts (empty unless ``plan="adaptive"``)."""
        return list(self.control_loop.evaluations) if self.control_loop is not None else []

    def switch(self, plan: Any, reason: str = "forced", *, estimates: Optional[dict] = None,
               measured: Optional[dict] = None, _on_phase=None, _by_controller: bool = False) -> dict:
        """Replace the plan in force by ``plan`` (anything :func:`start` takes as a plan) live: no task
        lost, none run twice; running tasks finish under the new plan. Only the process that started
        the runtime switches. Returns the entry appended to :attr:`history`.

        Example::

            rt = ra.start("drf_lb", plan="centralized")
            ...
            rt.switch("hybrid")
        """
        from ray_adaptive.compiler import analyze, lower, select_plan
        from ray_adaptive.runtime.switch import switch

        if self.binding is None:
            raise RuntimeError(f"only the process that started policy {self.name!r} can switch its plan")
        with self._switching:
            old = self.topology
            n = old.nodes
            chosen, why = select_plan(self.policy, plan, nodes=len(n), executors=n[0]["executors"],
                                      queue=n[0]["queue"])
            if chosen.name == self.plan.name:
                raise ValueError(f"plan {chosen.name!r} is already in force")
            start = time.time()
            new, what = switch(old, lower(chosen, analyze(self.policy)), on_phase=_on_phase)
            self._owned = new  # (actors live while their creator holds a handle: this process, until retired)
            self.router.wait_generation(new.generation)
            entry = {"time": start, "generation": new.generation, "from": self.plan.name, "to": chosen.name,
                     "reason": reason, "estimates": estimates or {}, "measured": measured or {},
                     "freeze_s": what["freeze_s"],
                     "exact": what["exact"], "unacked": what["unacked"]}
            log.info("ray-adaptive: policy %r switched from %s to %s in %.3f s: %s", self.name, self.plan.name,
                     chosen.name, what["freeze_s"], reason)
            self.plan, self.why = chosen, f"switched ({reason}): {why}"
            self._history.append(entry)
            self.publish_info()
        if self.control_loop is not None and not _by_controller:
            self.control_loop.switched(chosen.name)
        return entry

    def why_pending(self, task) -> dict:
        """Why a task submitted from this process is not placed yet, in words (``why``) and as data
        (``reason``: no-room, infeasible -- with the policy's FILE:LINE that said inf --, ranked --
        behind how many tasks, its best and the winning scores --, next, deadline, switching).
        ``task``: a task id, or the Future :meth:`PolicyFunction.submit` returned."""
        return self.router.explain(_task_id(self.router, task))

    def why_placed(self, task) -> dict:
        """Where a task of this process was placed and why: its score on each candidate node at the
        moment of the decision and the runner-up (from the deciding scheduler's recent decisions,
        ``decision_records`` of :func:`start`). ``task``: a task id, its Future, or its ObjectRef
        while it runs."""
        return self.router.explain(_task_id(self.router, task))

    def publish_info(self, **extra) -> None:
        """Tell the store what operators see of this runtime (``ray-adaptive status``): why this plan,
        the switches, the estimates."""
        info = {"why": self.why, "history": self.history[-20:], **extra}
        self.router.topology.store.set_info.remote(info)

    def pauses(self) -> Dict[int, float]:
        """Generation -> the pause this process's callers saw at that switch: its last decision under
        the old plan to its first under the new one (seconds; only switches while tasks waited)."""
        return {g: p for g, p in self.router.pauses}

    def pause_parts(self) -> Dict[int, Dict[str, float]]:
        """Generation -> where that switch's pause (:meth:`pauses`) went, in seconds: ``idle`` (no
        decision here between the last one and the freeze: e.g. every node was full), ``frozen``
        (the switch itself, freeze to resume) and ``after`` (resumed to the first decision)."""
        return {g: {"idle": i, "frozen": f, "after": a} for g, i, f, a in self.router.pause_parts}

    def shutdown(self, timeout: float = 60.0) -> None:
        """Cancel undecided tasks, wait up to ``timeout`` s for dispatched ones; the starting
        process also removes the actors and the slots."""
        if self.control_loop is not None:
            self.control_loop.stop()
        self.router.close(timeout)
        if self.binding is not None:
            if self._owned is not None and self._owned.generation != self.router.topology.generation:
                self._owned.retire()  # (a switch this router never took up: its actors go too)
            self.router.topology.close()
            self.binding.close()


def _cluster_nodes():
    import ray

    if not ray.is_initialized():
        raise RuntimeError("ray-adaptive needs a connected Ray cluster: call ray.init(...) before ra.start(...)")
    return [n for n in ray.nodes() if n["Alive"]]


def _alive_node_ids() -> set:
    return {n["NodeID"] for n in _cluster_nodes()}


def start(policy: "str | Policy", plan: Any = "auto", *, rate: Optional[float] = None,
          executors: Optional[int] = None, queue: int = 2,
          node_fields: Optional[Mapping[str, Mapping[str, Any]]] = None, group_by: Optional[str] = None,
          metrics_every_s: Optional[float] = 5.0, profile: Any = None, decision_records: int = 1000,
          hold: str = "auto", **adaptive) -> PolicyRuntime:
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
    import ray

    from ray_adaptive.compiler import analyze, lower, select_plan
    from ray_adaptive.plan import NodeState
    from ray_adaptive.plan.holding import HOLDS, resolve_hold
    from ray_adaptive.runtime.binding import SlotBinding
    from ray_adaptive.runtime.messages import new_client_id
    from ray_adaptive.runtime.topology import build

    p = policy if isinstance(policy, Policy) else load_policy(policy)
    if executors is not None and (not isinstance(executors, int) or executors < 1):
        raise ValueError(f"executors must be a positive int, got {executors!r}")
    if not isinstance(queue, int) or queue < 0:
        raise ValueError(f"queue must be a non-negative int, got {queue!r}")
    if hold not in HOLDS:
        raise ValueError(f"hold must be one of {', '.join(map(repr, HOLDS))}, got {hold!r}")
    if rate is not None and not (isinstance(rate, (int, float)) and rate > 0):
        raise ValueError(f"rate must be a positive number of tasks/s, got {rate!r}")
    node_fields = dict(node_fields or {})
    group_by = _group_by(p, group_by)
    settings, extra = _adaptive_settings(plan, adaptive)
    if metrics_every_s is not None and not metrics_every_s > 0:
        raise ValueError(f"metrics_every_s must be > 0 seconds or None, got {metrics_every_s!r}")
    if isinstance(decision_records, bool) or not isinstance(decision_records, int) or decision_records < 0:
        raise ValueError(f"decision_records must be an int >= 0, got {decision_records!r}")
    with _lock:
        if p.name in _runtimes:
            raise ValueError(f"policy {p.name!r} is already running; call ra.shutdown({p.name!r}) first")
        nodes = []
        for i, info in enumerate(_cluster_nodes()):
            what = f"node {info['NodeID'][:12]}"
            given = node_fields.get(info["NodeID"], {})
            fields = {**_label_fields(p.node_fields, info.get("Labels") or {}, set(given), what), **given}
            _check_fields(p.node_fields, fields, what, "node_fields")
            ex = executors if executors is not None else max(1, int(info["Resources"].get("CPU", 1)))
            nodes.append(NodeState(info["NodeID"], i, ex, queue, dict(info["Resources"]), fields).as_dict())
        if settings is not None and "table" in extra:
            _check_table(extra["table"], p.name, len(nodes))
        first = plan if settings is None else extra.get("initial", "auto")
        chosen, why = select_plan(p, first, nodes=len(nodes),
                                  executors=nodes[0]["executors"], queue=queue, rate=rate, profile=profile)
        lowered = lower(chosen, analyze(p))
        overflow, holding = resolve_hold(hold, lowered.split)
        binding = SlotBinding(p.name, {n["id"]: n["executors"] + n["queue"] for n in nodes})
        topology = None
        try:
            slots = {node: slot.resource for node, slot in binding.slots.items()}
            topology = build(lowered, nodes, slots, ray.get_runtime_context().get_node_id(), decision_records,
                             overflow)
            client = new_client_id()
            ray.get(topology.store.join.remote(client))
            rt = _runtime(p, chosen, why, topology, client, group_by, metrics_every_s, binding)
            rt.holding = holding
            rt.publish_info(group_by=group_by)
            if settings is not None:
                rt.control_loop = _adapt(rt, settings, extra.get("fractions"), profile, extra.get("trace"),
                                       extra.get("table"))
        except BaseException:
            if topology is not None:
                topology.close()
            binding.close()
            raise
        _runtimes[p.name] = rt
        return rt


def _task_id(router, task) -> str:
    if isinstance(task, str):
        return task
    if isinstance(task, Future) and hasattr(task, "task_id"):
        return task.task_id
    found = router.task_id_of(task)
    if found is None:
        raise ValueError(f"{task!r} is not a task of this process that runs now: give its task id or its Future")
    return found


def _adaptive_settings(plan: Any, adaptive: dict):
    """The controller's :class:`~ray_adaptive.control.Settings` and grid for ``plan="adaptive"`` (else None)."""
    from ray_adaptive.control import Settings

    if plan != "adaptive":
        if adaptive:
            raise TypeError(f"start() got controller settings {sorted(adaptive)} but plan={plan!r}; they are for "
                            f"plan='adaptive'")
        return None, None
    options = ("fractions", "initial", "trace", "table")
    extra = {k: adaptive.pop(k) for k in options if k in adaptive}
    known = set(Settings.__dataclass_fields__)
    unknown = sorted(set(adaptive) - known)
    if unknown:
        raise TypeError(f"start() got unknown keyword arguments {unknown}; plan='adaptive' takes: "
                        f"{', '.join(sorted(known | set(options)))}")
    trace = extra.get("trace")
    if trace is not None and (isinstance(trace, (str, bytes)) or len(trace) < 10):  # (estimate_table's floor)
        raise ValueError("trace= must be a sequence of at least 10 task specs (ray_adaptive.workload.specs.TaskSpec)")
    if "table" in extra and ("trace" in extra or "fractions" in extra):
        raise TypeError("start() got table= with trace= or fractions=; they compute the first table: give one or the other")
    return Settings(**adaptive), extra


def _check_table(table, policy: str, nodes: int) -> None:
    """A first estimate table given to ``start()`` is one for this policy and cluster."""
    from ray_adaptive.control import EstimateTable

    if not isinstance(table, EstimateTable):
        raise TypeError(f"table= must be an EstimateTable (ray_adaptive.compiler.estimate_table), "
                        f"found {type(table).__name__}")
    if table.policy != policy or table.nodes != nodes:
        raise ValueError(f"table= was computed for policy {table.policy!r} on {table.nodes} nodes; this runtime "
                         f"runs {policy!r} on {nodes}")


def _adapt(rt: "PolicyRuntime", settings, fractions, profile, first_trace=None, first_table=None):
    """Start the adaptive loop of ``rt``; its estimate table is computed by a Ray task (``num_cpus=0``):
    seconds of replays in this process would hold its GIL against the callers' submissions. The first
    table is ``first_table``, or computed on ``first_trace`` (None: the compiler's default workload for
    the policy)."""
    import ray

    from ray_adaptive.control_loop import ControlLoop
    from ray_adaptive.compiler import estimate_table

    n = rt.topology.nodes
    if first_table is not None:  # (refreshed tables keep its grid)
        fractions = tuple(r / first_table.capacity for r in first_table.rates)
    extra = {"fractions": tuple(fractions)} if fractions else {}
    compute = ray.remote(num_cpus=0, max_retries=1)(estimate_table)

    def table_for(trace):
        trace = first_trace if trace is None else trace  # (None: the first table; later, the recorded workload)
        return ray.get(compute.remote(rt.policy, nodes=len(n), executors=n[0]["executors"], queue=n[0]["queue"],
                                      trace=trace, profile=profile, workers=1, **extra))

    return ControlLoop(rt, settings, table_for, first_table)


def _group_by(p: Policy, group_by: Optional[str]) -> Optional[str]:
    task_fields = [f.name for f in p.task_fields]
    if group_by is None and "tenant" in task_fields:
        group_by = "tenant"
    if group_by is not None and group_by not in task_fields:
        raise ValueError(f"group_by={group_by!r} is not a Task field of policy {p.name!r} ({', '.join(task_fields) or 'none'})")
    return group_by


def _runtime(p: Policy, plan, why: str, topology, client: str, group_by, metrics_every_s,
             binding=None) -> PolicyRuntime:
    """This process's side of a running topology: a router with this process's decider."""
    from ray_adaptive.monitor import Monitor
    from ray_adaptive.runtime.router import Router

    on_dead = None
    if binding is not None:  # the starting process moves a dead node's slot to a live node
        def on_dead(node_id: str) -> None:
            alive = _alive_node_ids()
            hosts = [n for n in binding.slots if n in alive]
            if hosts:
                binding.rehome(node_id, min(hosts, key=lambda h: router.outstanding().get(h, 0)))

    # a caller waiting for room wakes after this many finishes: before a node's queue can run dry
    wake_after = max(1, min(n["queue"] for n in topology.nodes) // 2)
    router = Router(p, topology, client=client, alive_nodes=_alive_node_ids, on_dead=on_dead,
                    monitor=Monitor(p.name, group_by), metrics_every_s=metrics_every_s, wake_after=wake_after)
    return PolicyRuntime(p, plan, why, router, binding)


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
    import ray

    from ray_adaptive.runtime.messages import new_client_id
    from ray_adaptive.runtime.topology import join

    if not ray.is_initialized():
        return None
    client = new_client_id()
    topology = join(name, client)
    if topology is None:
        return None
    p = topology.plan.policy
    rt = _runtime(p, topology.plan.plan, "joined", topology, client, _group_by(p, None), 5.0)
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


_LABEL_VALUES = {"int": int, "float": float, "string": str,
                 "bool": lambda v: {"true": True, "false": False}[v.lower()]}


def _label_fields(decls, labels: Mapping[str, str], given: set, what: str) -> Dict[str, Any]:
    """The policy's scalar ``Node:`` fields a node's Ray labels (``ray start --labels``) give.

    Labels are how a cluster config says what a node is (its zone, its rack),
    so a policy that declares ``zone: string`` reads it from there without the
    driver copying ``ray.nodes()`` into ``node_fields=``; labels the policy does
    not declare are Ray's business and are left alone, and so are the fields
    ``given`` in ``node_fields=``, which win.
    """
    out: Dict[str, Any] = {}
    for d in decls:
        convert = _LABEL_VALUES.get(d.type.kind)
        if convert is None or d.name not in labels or d.name in given:
            continue
        try:
            out[d.name] = convert(labels[d.name])
        except (ValueError, KeyError):
            raise TypeError(f"{what}: its Ray label {d.name}={labels[d.name]!r} cannot be read as {d.type} "
                            f"(the policy's Node field {d.name!r}); relabel the node or pass node_fields=") from None
    return out


def _check_fields(decls, values: Mapping[str, Any], what: str, arg: str) -> None:
    problem = field_problem(decls, values)
    if problem is None:
        return
    kind, name, t = problem
    if kind == "unknown":
        declared = ", ".join(d.name for d in decls) or "none"
        raise TypeError(f"{what}: unknown field {name!r} in {arg}=; the policy declares: {declared}")
    if kind == "missing":
        raise TypeError(f"{what}: field {name!r} ({t}) is missing; pass it in {arg}="
                        + (f" or label the node (ray start --labels {name}=...)" if arg == "node_fields" else ""))
    raise TypeError(f"{what}: field {name!r} must be {t}, got {values[name]!r}")


class PolicyFunction:
    """A ``@ray.remote`` function whose placement a policy decides. Made by :func:`policy`."""

    def __init__(self, remote_fn, policy_name: str, task: Optional[Mapping[str, Any]] = None,
                 options: Optional[Dict[str, Any]] = None, deadline_s: float = math.inf):
        self._fn = remote_fn
        self._policy = policy_name
        self._task = dict(task or {})
        self._options = dict(options or {})
        self._deadline_s = deadline_s
        self._bound: dict = {}
        self._bound_key: Optional[tuple] = None
        self._bound_slots: Optional[dict] = None  # the slot mapping _bound was made for (its identity)
        self._checked: Optional[Policy] = None  # the policy the fields were checked against

    def options(self, task: Optional[Mapping[str, Any]] = None, deadline_s: Optional[float] = None,
                **ray_options) -> "PolicyFunction":
        """Ray's own task options plus ``task=``, the policy's Task fields, and ``deadline_s``: a task
        the policy has not placed that many seconds after its submission is dropped, never
        launched (its ``.remote()``, or its Future's ``result()``, raises
        :class:`~ray_adaptive.errors.PlacementDeadlineExceeded` at the deadline), the overload
        behaviour of the compiler's cluster model."""
        bad = [k for k in _PLACEMENT_OPTIONS if k in ray_options]
        if bad:
            raise ValueError(f"option {bad[0]!r} conflicts with policy {self._policy!r}, which places the task itself")
        if task is not None and not isinstance(task, Mapping):
            raise TypeError(f"task= must be a dict of the policy's Task fields, got {task!r}")
        if deadline_s is not None and (isinstance(deadline_s, bool) or not isinstance(deadline_s, (int, float))
                                       or not deadline_s > 0):
            raise ValueError(f"deadline_s must be a number of seconds > 0, got {deadline_s!r}")
        self._fn.options(**ray_options)  # let Ray validate its own options now
        merged = {**self._options, **ray_options}
        return PolicyFunction(self._fn, self._policy, {**self._task, **(task or {})}, merged,
                              self._deadline_s if deadline_s is None else float(deadline_s))

    def submit(self, *args, **kwargs) -> Future:
        """Queue the task; returns a Future of its ObjectRef (resolved when placed)."""
        return self._route(args, kwargs, wait=False)

    def _route(self, args, kwargs, wait: bool):
        """Hand this call to the policy's router (its fields checked first): the ObjectRef once
        placed (``wait``), else a Future of it. What does not change between calls -- the
        runtime, the fields' check against its policy, the per-node bound functions -- is
        looked up once, not per task."""
        rt = _runtimes.get(self._policy) or runtime_of(self._policy)  # (a dict read needs no lock)
        if self._checked is not rt.policy:
            _check_fields(rt.policy.task_fields, self._task, f"task for policy {self._policy!r}", "task")
            self._checked = rt.policy
        bound = self._bound_per_node(rt)

        def launch(node_id: str):
            return bound[node_id](args, kwargs)

        # (the fields are this object's own copy, read-only from here: every task shares them)
        # (``bound``'s identity: tasks Ray queues alike, one function and options; see the router)
        if wait:
            return rt.router.call(self._task, launch, self._deadline_s, id(bound))
        return rt.router.submit(self._task, launch, self._deadline_s, id(bound))

    def _bound_per_node(self, rt: PolicyRuntime) -> dict:
        """node id -> ``launch(args, kwargs)`` of this function with its options and that node's
        slot, made once per runtime: Ray's ``.options()`` costs more than the decision itself,
        and its ``.remote()`` redoes per call what depends on the options only (see
        :mod:`ray_adaptive._private.submit`). Keyed by the exact node -> slot mapping, so a
        restarted policy never reuses a stale binding."""
        slots = rt.slots
        if slots is self._bound_slots:
            return self._bound
        key = tuple(slots.items())
        if self._bound_key != key:
            user_resources = self._options.get("resources") or {}
            base = {k: v for k, v in self._options.items() if k != "resources"}
            self._bound = {node: launcher(self._fn.options(**base, resources={**user_resources, slot: 1}))
                           for node, slot in slots.items()}
            self._bound_key = key
        self._bound_slots = slots
        return self._bound

    def remote(self, *args, **kwargs):
        """Submit and return the task's ``ray.ObjectRef`` once the policy has placed it."""
        return self._route(args, kwargs, wait=True)

    def __call__(self, *args, **kwargs):
        raise TypeError("a policy-decorated remote function is called with .remote(...), as with Ray")


def policy(name: str):
    """Decorate a ``@ray.remote`` function so that policy ``name`` places its tasks.

    Put it above ``@ray.remote``::

        @ra.policy("drf_lb")
        @ray.remote(num_cpus=1)
        def work(x): ...
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"@ra.policy takes a policy name, got {name!r}")

    def wrap(remote_fn):
        from ray.remote_function import RemoteFunction

        if not isinstance(remote_fn, RemoteFunction):
            raise TypeError(
                f"@ra.policy({name!r}) must decorate a @ray.remote function (put it above @ray.remote); got {remote_fn!r}"
            )
        return PolicyFunction(remote_fn, name)

    return wrap
