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

import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

from ray_adaptive.dsl import load_policy
from ray_adaptive.dsl.ir import Policy, field_problem

__all__ = ["start", "shutdown", "policy", "PolicyRuntime", "PolicyFunction", "runtime_of"]

PLANS = ("caller",)
# Options that would take placement away from the policy.
_PLACEMENT_OPTIONS = ("scheduling_strategy", "placement_group", "placement_group_bundle_index",
                      "placement_group_capture_child_tasks")

_lock = threading.Lock()
_runtimes: Dict[str, "PolicyRuntime"] = {}


@dataclass
class PolicyRuntime:
    """A policy running on the connected cluster (see :func:`start`)."""

    policy: Policy
    plan: str
    router: Any
    binding: Any

    @property
    def name(self) -> str:
        return self.policy.name

    @property
    def monitor(self):
        """The :class:`~ray_adaptive.monitor.Monitor` of this runtime."""
        return self.router.monitor

    def stats(self) -> dict:
        """Counts so far and decision latency percentiles (seconds)."""
        s = self.router.stats
        lat = sorted(self.router.decision_latencies())
        pct = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else 0.0)
        return {"submitted": s.submitted, "dispatched": s.dispatched, "finished": s.finished,
                "pending": self.router.pending, "decision_p50_s": pct(0.5), "decision_p99_s": pct(0.99)}

    def shutdown(self, timeout: float = 60.0) -> None:
        """Cancel pending tasks, wait up to ``timeout`` s for dispatched ones, remove the slots."""
        self.router.close(timeout)
        self.binding.close()


def _cluster_nodes():
    import ray

    if not ray.is_initialized():
        raise RuntimeError("ray-adaptive needs a connected Ray cluster: call ray.init(...) before ra.start(...)")
    return [n for n in ray.nodes() if n["Alive"]]


def _alive_node_ids() -> set:
    return {n["NodeID"] for n in _cluster_nodes()}


def start(policy: "str | Policy", plan: str = "caller", *, executors: Optional[int] = None, queue: int = 2,
          node_fields: Optional[Mapping[str, Mapping[str, Any]]] = None, group_by: Optional[str] = None,
          metrics_every_s: Optional[float] = 5.0) -> PolicyRuntime:
    """Run ``policy`` (a shipped name, a path, or a parsed Policy) on the connected cluster.

    Args:
        plan: how decisions are made. ``"caller"``: in the submitting process
            on the policy's State, no actor in the launch path (the only plan
            of this version; the compiler-chosen topologies come next).
        executors: tasks each node runs at once (default: its CPU count).
        queue: tasks each node may hold waiting besides those running.
        node_fields: node id -> values of the policy's ``Node:`` fields.
        group_by: the Task field the monitor groups figures by (default:
            ``tenant`` when the policy has one).
        metrics_every_s: how often the monitor sets the Ray metrics
            (``ray_adaptive_*``); None: never.

    Example::

        rt = ra.start("least_loaded", queue=1)
        ...
        ra.shutdown()
    """
    from ray_adaptive.monitor import Monitor
    from ray_adaptive.runtime.binding import SlotBinding
    from ray_adaptive.runtime.router import Router, _Node

    p = policy if isinstance(policy, Policy) else load_policy(policy)
    if plan not in PLANS:
        raise ValueError(f"plan {plan!r} is not available in this version; expected one of {', '.join(PLANS)}")
    if executors is not None and (not isinstance(executors, int) or executors < 1):
        raise ValueError(f"executors must be a positive int, got {executors!r}")
    if not isinstance(queue, int) or queue < 0:
        raise ValueError(f"queue must be a non-negative int, got {queue!r}")
    node_fields = dict(node_fields or {})
    task_fields = [f.name for f in p.task_fields]
    if group_by is None and "tenant" in task_fields:
        group_by = "tenant"
    if group_by is not None and group_by not in task_fields:
        raise ValueError(f"group_by={group_by!r} is not a Task field of policy {p.name!r} ({', '.join(task_fields) or 'none'})")
    if metrics_every_s is not None and not metrics_every_s > 0:
        raise ValueError(f"metrics_every_s must be > 0 seconds or None, got {metrics_every_s!r}")
    with _lock:
        if p.name in _runtimes:
            raise ValueError(f"policy {p.name!r} is already running; call ra.shutdown({p.name!r}) first")
        nodes = []
        for i, info in enumerate(_cluster_nodes()):
            fields = dict(node_fields.get(info["NodeID"], {}))
            _check_fields(p.node_fields, fields, f"node {info['NodeID'][:12]}", "node_fields")
            ex = executors if executors is not None else max(1, int(info["Resources"].get("CPU", 1)))
            nodes.append(_Node(info["NodeID"], i, ex, queue, dict(info["Resources"]), fields))
        binding = SlotBinding(p.name, {n.id: n.executors + n.queue for n in nodes})
        try:
            router = Router(p, nodes, binding, alive_nodes=_alive_node_ids,
                            monitor=Monitor(p.name, group_by), metrics_every_s=metrics_every_s)
            rt = PolicyRuntime(p, plan, router, binding)
        except BaseException:
            binding.close()
            raise
        _runtimes[p.name] = rt
        return rt


def runtime_of(name: str) -> PolicyRuntime:
    """The running runtime of policy ``name``."""
    with _lock:
        rt = _runtimes.get(name)
    if rt is None:
        running = ", ".join(sorted(_runtimes)) or "none"
        raise RuntimeError(f"policy {name!r} is not running: call ra.start({name!r}) first (running: {running})")
    return rt


def shutdown(name: Optional[str] = None) -> None:
    """Stop one policy's runtime (or all): pending tasks are cancelled, slots removed."""
    with _lock:
        names = [name] if name is not None else list(_runtimes)
        targets = [_runtimes.pop(n) for n in names if n in _runtimes]
    for rt in targets:
        rt.shutdown()


def _check_fields(decls, values: Mapping[str, Any], what: str, arg: str) -> None:
    problem = field_problem(decls, values)
    if problem is None:
        return
    kind, name, t = problem
    if kind == "unknown":
        declared = ", ".join(d.name for d in decls) or "none"
        raise TypeError(f"{what}: unknown field {name!r} in {arg}=; the policy declares: {declared}")
    if kind == "missing":
        raise TypeError(f"{what}: field {name!r} ({t}) is missing; pass it in {arg}=")
    raise TypeError(f"{what}: field {name!r} must be {t}, got {values[name]!r}")


class PolicyFunction:
    """A ``@ray.remote`` function whose placement a policy decides. Made by :func:`policy`."""

    def __init__(self, remote_fn, policy_name: str, task: Optional[Mapping[str, Any]] = None,
                 options: Optional[Dict[str, Any]] = None):
        self._fn = remote_fn
        self._policy = policy_name
        self._task = dict(task or {})
        self._options = dict(options or {})
        self._bound: dict = {}
        self._bound_key: Optional[tuple] = None

    def options(self, task: Optional[Mapping[str, Any]] = None, **ray_options) -> "PolicyFunction":
        """Ray's own task options plus ``task=``, the policy's Task fields."""
        bad = [k for k in _PLACEMENT_OPTIONS if k in ray_options]
        if bad:
            raise ValueError(f"option {bad[0]!r} conflicts with policy {self._policy!r}, which places the task itself")
        if task is not None and not isinstance(task, Mapping):
            raise TypeError(f"task= must be a dict of the policy's Task fields, got {task!r}")
        self._fn.options(**ray_options)  # let Ray validate its own options now
        merged = {**self._options, **ray_options}
        return PolicyFunction(self._fn, self._policy, {**self._task, **(task or {})}, merged)

    def submit(self, *args, **kwargs) -> Future:
        """Queue the task; returns a Future of its ObjectRef (resolved when placed)."""
        rt = runtime_of(self._policy)
        _check_fields(rt.policy.task_fields, self._task, f"task for policy {self._policy!r}", "task")
        bound = self._bound_per_node(rt)

        def launch(node_id: str):
            return bound[node_id].remote(*args, **kwargs)

        return rt.router.submit(dict(self._task), launch)

    def _bound_per_node(self, rt: PolicyRuntime) -> dict:
        """node id -> this function with its options and that node's slot, made once per
        runtime: Ray's ``.options()`` costs more than the decision itself. Keyed by the
        exact node -> slot mapping, so a restarted policy never reuses a stale binding."""
        key = tuple((node, slot.resource) for node, slot in rt.binding.slots.items())
        if self._bound_key != key:
            user_resources = self._options.get("resources") or {}
            base = {k: v for k, v in self._options.items() if k != "resources"}
            self._bound = {
                node: self._fn.options(**base, resources={**user_resources, **rt.binding.options_for(node)["resources"]})
                for node in rt.binding.slots
            }
            self._bound_key = key
        return self._bound

    def remote(self, *args, **kwargs):
        """Submit and return the task's ``ray.ObjectRef`` once the policy has placed it."""
        return runtime_of(self._policy).router.wait(self.submit(*args, **kwargs))

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
