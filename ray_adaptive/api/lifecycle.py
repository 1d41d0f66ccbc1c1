"""Starting, joining and stopping a policy's runtime; the runtimes this process knows, by policy name."""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Dict, Mapping, Optional

import ray

from ray_adaptive._private import shutdown_hook
from ray_adaptive.api import service
from ray_adaptive.api.owner import Adaptive, Options, attached, own
from ray_adaptive.api.runtime import PolicyRuntime
from ray_adaptive.control import Settings
from ray_adaptive.dsl import load_policy
from ray_adaptive.dsl.ir import Policy
from ray_adaptive.plan.holding import HOLDS
from ray_adaptive.runtime.messages import new_client_id
from ray_adaptive.runtime.tenancy import parse_bind
from ray_adaptive.runtime.topology import NAMESPACE, actor_name, join

__all__ = ["start", "shutdown", "stop", "runtime_of", "registered"]

_lock = threading.Lock()
_runtimes: Dict[str, PolicyRuntime] = {}

_ADAPTIVE_OPTIONS = ("fractions", "initial", "trace", "table")
_DEFAULTS = Options()
log = logging.getLogger("ray_adaptive")


def _before_ray_shutdown() -> None:
    """What ``ray.shutdown()`` runs first (see :mod:`ray_adaptive._private.shutdown_hook`): every runtime of this
    process stops -- its undecided tasks cancelled, its threads joined, running tasks not waited for (they go
    with Ray) -- while Ray still answers."""
    with _lock:
        targets = list(_runtimes.values())
        _runtimes.clear()
    for rt in targets:
        try:
            rt.shutdown(timeout=0.0)
        except Exception:  # (Ray is going anyway: what is left goes with it)
            log.debug("ray-adaptive: stopping policy %r before ray.shutdown failed", rt.name, exc_info=True)


def registered(name: str) -> Optional[PolicyRuntime]:
    """The runtime of policy ``name`` this process started or joined, if any (a dict read: no lock). One
    whose Ray was shut down under it (``ray.shutdown()`` without ``ra.shutdown()``) is forgotten here."""
    rt = _runtimes.get(name)
    if rt is not None and rt.router.closed:
        _runtimes.pop(name, None)
        return None
    return rt


def start(policy: "str | Policy", plan: Any = "auto", *, rate: Optional[float] = None,
          executors: Optional[int] = None, queue: int = 2,
          node_fields: Optional[Mapping[str, Mapping[str, Any]]] = None, group_by: Optional[str] = None,
          metrics_every_s: Optional[float] = 5.0, profile: Any = None, decision_records: int = 1000,
          hold: str = "auto", detached: bool = False, bind: Optional[Mapping[str, str]] = None,
          **adaptive: Any) -> PolicyRuntime:
    """Run ``policy`` (a shipped name, a path, or a parsed Policy) on the connected cluster, or attach to it
    where it runs already.

    One runtime of a policy runs per cluster. Where one runs (a policy service's, or another driver's),
    ``start`` called with no option but the policy attaches this process to it, as ``@ra.policy`` does
    on its own; with other options it refuses (they are the running one's to set).

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
            ``prefer_cheaper``, ``urgent``: see :class:`ray_adaptive.control.Settings`), ``fractions`` (the
            estimate grid's rates, as fractions of the cluster's execution bound), ``initial``
            (the plan to start with, any plan this function takes; default ``"auto"``) and
            ``trace`` (task specs of the expected workload: the first estimate table is computed
            on it rather than on the compiler's default workload, so the controller's rates and
            durations are right from the start; later tables, on the recorded workload) or ``table``
            (that first table itself, from :func:`ray_adaptive.compiler.estimate_table` for this
            policy and cluster: the controller starts at once, with no compile; later tables on
            its grid of rates).
        detached: run it as the cluster's **policy service**: its actors owned by no driver, it outlives
            this process, every job attaches to it by name, and it switches plans, runs the controller
            and watches the jobs itself (see :mod:`ray_adaptive.api.service`). This process attaches to
            it; :func:`shutdown` then only detaches this process, and :func:`stop` stops the service.
        bind: Task field -> ``"job"`` (the submitting Ray job's id) or ``"metadata:KEY"`` (a key of the
            job's submission metadata): a job's tasks get their job's value and are refused another
            (see :mod:`ray_adaptive.runtime.tenancy`). E.g. ``bind={"tenant": "metadata:team"}``.

    Example::

        rt = ra.start("least_loaded", plan="centralized", queue=1)
        ...
        ra.shutdown()
    """
    p = policy if isinstance(policy, Policy) else load_policy(policy)
    _check_options(executors, queue, hold, rate, metrics_every_s, decision_records)
    adapt = _adaptive_settings(plan, adaptive)
    if bind is not None and not isinstance(bind, Mapping):
        raise TypeError(f"bind= must be a dict of Task field -> 'job' or 'metadata:KEY', got {bind!r}")
    options = Options(plan, rate, executors, queue, node_fields, _group_by(p, group_by), metrics_every_s, profile,
                      decision_records, hold, adapt,
                      parse_bind([f"{k}={v}" for k, v in bind.items()], p.task_fields, p.name) if bind else None)
    if not ray.is_initialized():
        raise RuntimeError("ray-adaptive needs a connected Ray cluster: call ray.init(...) before ra.start(...)")
    shutdown_hook.install(_before_ray_shutdown)
    with _lock:
        if registered(p.name) is not None:
            raise ValueError(f"policy {p.name!r} is already running; call ra.shutdown({p.name!r}) first")
        if _running(p.name):
            return _attach_instead(p, options, detached)
        if detached:
            service.launch(p, options)
            rt = _join(p.name)
            if rt is None:
                raise RuntimeError(f"the service of policy {p.name!r} started but cannot be joined")
            return rt
        rt = own(p, options)
        _runtimes[p.name] = rt
        return rt


def _running(name: str) -> bool:
    """A runtime of policy ``name`` runs on the connected cluster (its store answers to its name)."""
    try:
        ray.get_actor(actor_name(name, "store"), namespace=NAMESPACE)
    except ValueError:
        return False
    return True


def _attach_instead(p: Policy, options: Options, detached: bool) -> PolicyRuntime:
    """``start`` for a policy that runs already: attach, unless options were given (holds _lock)."""
    given = sorted(f.name for f in dataclasses.fields(Options)
                   if f.name != "group_by" and getattr(options, f.name) != getattr(_DEFAULTS, f.name))
    owner = "the policy service" if service.find(p.name) is not None else "another driver"
    if given or detached:
        raise ValueError(f"policy {p.name!r} already runs on this cluster, owned by {owner}: its options are set; "
                         f"ra.start({p.name!r}) with no other option (or @ra.policy alone) attaches to it "
                         f"(given here: {', '.join(given + (['detached'] if detached else []))}); to run it otherwise, "
                         f"stop it first (ray-adaptive stop {p.name})")
    rt = _join(p.name)
    if rt is None:
        raise RuntimeError(f"policy {p.name!r} stopped while this process attached to it")
    log.info("ray-adaptive: policy %r runs already (%s, plan %s): attached", p.name, owner, rt.plan.name)
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
    if rate is not None:  # (True is not 1 task/s; 1e308 is no rate the compiler can replay)
        from ray_adaptive.workload.limits import MAX_RATE, check_rate

        try:
            check_rate(rate, "rate")
        except ValueError:
            raise ValueError(f"rate must be a number of tasks/s in (0, {MAX_RATE:g}], got {rate!r}") from None
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


def _adaptive_settings(plan: Any, adaptive: Dict[str, Any]) -> Optional[Adaptive]:
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
    return Adaptive(Settings(**adaptive), tuple(fractions) if fractions else None, extra.get("initial", "auto"),
                     trace, extra.get("table"))


def runtime_of(name: str) -> PolicyRuntime:
    """The runtime of policy ``name`` in this process; joins one another process started
    (a task or actor submitting policy tasks) on first use."""
    with _lock:
        rt = registered(name)
        if rt is None:
            rt = _join(name)
    if rt is None:
        if not ray.is_initialized():
            raise RuntimeError(f"policy {name!r}: Ray is not connected in this process (ray.init() first; the "
                               f"library never starts Ray on its own)")
        running = ", ".join(sorted(_runtimes)) or "none"
        raise RuntimeError(f"policy {name!r} is not running: call ra.start({name!r}) first (running here: {running})")
    return rt


def _join(name: str) -> Optional[PolicyRuntime]:
    """Holds _lock."""
    if not ray.is_initialized():
        return None
    shutdown_hook.install(_before_ray_shutdown)
    client = new_client_id()
    topology = join(name, client)
    if topology is None:
        return None
    p = topology.plan.policy
    why = ray.get(topology.store.info.remote(), timeout=30).get("why") or "joined"  # (the owner's reasons)
    rt = attached(p, None, why, topology, client, _group_by(p, None), 5.0)
    _runtimes[name] = rt
    return rt


def shutdown(name: Optional[str] = None) -> None:
    """Stop one policy's runtime (or all) in this process: its undecided tasks are cancelled; the
    process that started a runtime also removes its actors and slots. A process attached to a policy
    service (or another driver's runtime) only detaches: the runtime goes on (:func:`stop` stops it)."""
    with _lock:
        names = [name] if name is not None else list(_runtimes)
        targets = [_runtimes.pop(n) for n in names if n in _runtimes]
    for rt in targets:
        rt.shutdown()


def stop(name: str, timeout_s: float = 60.0) -> bool:
    """Stop policy ``name``'s runtime on the whole cluster, whoever owns it -- the policy service, or what a
    driver that died left -- after this process detaches from it: no actor of the policy and no slot
    resource of it is left on any node. Its tasks running now finish first (up to ``timeout_s``); the
    undecided tasks of the jobs attached to it fail. Returns whether one ran.

    Example::

        ra.start("drf_lb", detached=True, bind={"tenant": "metadata:team"})
        ...                      # jobs attach with @ra.policy("drf_lb")
        ra.stop("drf_lb")        # what `ray-adaptive stop drf_lb` does
    """
    here = registered(name) is not None
    shutdown(name)
    if not ray.is_initialized():
        raise RuntimeError("ray-adaptive needs a connected Ray cluster to stop a policy: call ray.init(...) first")
    return service.stop(name, timeout_s) or here
