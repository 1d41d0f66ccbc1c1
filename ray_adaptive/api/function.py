"""``@ra.policy(name)``: a ``@ray.remote`` function whose tasks a running policy places."""

from __future__ import annotations

import math
from concurrent.futures import Future
from typing import Any, Dict, Mapping, Optional

from ray.actor import ActorClass
from ray.remote_function import RemoteFunction

from ray_adaptive._private.submit import default_options, launcher
from ray_adaptive.api.fields import check_task_fields
from ray_adaptive.api.lifecycle import registered, runtime_of
from ray_adaptive.api.runtime import PolicyRuntime
from ray_adaptive.plan.fit import demand_of
from ray_adaptive.runtime.tenancy import apply_bound

__all__ = ["PolicyFunction", "policy"]

# Options that would take placement away from the policy.
_PLACEMENT_OPTIONS = ("scheduling_strategy", "placement_group", "placement_group_bundle_index",
                      "placement_group_capture_child_tasks")


class PolicyFunction:
    """A ``@ray.remote`` function whose placement a policy decides. Made by :func:`policy`."""

    def __init__(self, remote_fn: RemoteFunction, policy_name: str, task: Optional[Mapping[str, Any]] = None,
                 options: Optional[Dict[str, Any]] = None, deadline_s: float = math.inf, preemptible: bool = False):
        self._fn = remote_fn
        self._policy = policy_name
        self._task = dict(task or {})
        self._options = dict(options or {})
        self._deadline_s = deadline_s
        self._preemptible = preemptible
        self._bound: dict = {}
        self._bound_key: Optional[tuple] = None
        self._bound_slots: Optional[dict] = None  # the slot mapping _bound was made for (its identity)
        self._checked: Optional[PolicyRuntime] = None  # the runtime the fields were checked for
        self._fields: Dict[str, Any] = self._task  # the task's fields as checked (and bound) for it
        # the Ray resources each task asks for: the policy places it only on nodes that have them
        self._demand = demand_of({**default_options(remote_fn), **self._options})

    def options(self, task: Optional[Mapping[str, Any]] = None, deadline_s: Optional[float] = None,
                preemptible: Optional[bool] = None, **ray_options: Any) -> "PolicyFunction":
        """Ray's own task options plus ``task=``, the policy's Task fields, and ``deadline_s``: a task
        the policy has not placed that many seconds after its submission is dropped, never
        launched (its ``.remote()``, or its Future's ``result()``, raises
        :class:`~ray_adaptive.errors.PlacementDeadlineExceeded` at the deadline), the overload
        behaviour of the compiler's cluster model.

        ``preemptible=True``: a policy's ``Preempt`` may stop a run of the task, after the policy's
        grace, so that a waiting task takes its place; the task waits again and runs anew (at most the
        policy's ``max`` times). Its ``.remote()`` returns one ``ObjectRef`` that resolves to the result
        of its final run -- never to a cancellation -- or to the error the task itself raised. Its
        body may start more than once (a stopped run's worker is killed): mark a task preemptible only
        if its body is idempotent or restartable (docs/language.md, *Preemption*). Default False."""
        bad = [k for k in _PLACEMENT_OPTIONS if k in ray_options]
        if bad:
            raise ValueError(f"option {bad[0]!r} conflicts with policy {self._policy!r}, which places the task itself")
        if preemptible is not None and not isinstance(preemptible, bool):
            raise TypeError(f"preemptible must be True or False, got {preemptible!r} "
                            f"(a {type(preemptible).__name__})")
        if task is not None and not isinstance(task, Mapping):
            raise TypeError(f"task= must be a dict of the policy's Task fields, got {task!r}")
        if deadline_s is not None and (isinstance(deadline_s, bool) or not isinstance(deadline_s, (int, float))
                                       or not deadline_s > 0):
            raise ValueError(f"deadline_s must be a number of seconds > 0, got {deadline_s!r}")
        rt = registered(self._policy)
        if rt is not None and task:  # (the policy runs here: refused now; a submission checks every field)
            check_task_fields(rt.policy, task, f"task for policy {self._policy!r}", partial=True)
        self._fn.options(**ray_options)  # let Ray validate its own options now
        merged = {**self._options, **ray_options}
        return PolicyFunction(self._fn, self._policy, {**self._task, **(task or {})}, merged,
                              self._deadline_s if deadline_s is None else float(deadline_s),
                              self._preemptible if preemptible is None else preemptible)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Submit and return the task's ``ray.ObjectRef`` once the policy has placed it."""
        return self._route(args, kwargs, wait=True)

    def submit(self, *args: Any, **kwargs: Any) -> Future:
        """Queue the task; returns a Future of its ObjectRef (resolved when placed)."""
        return self._route(args, kwargs, wait=False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a policy-decorated remote function is called with .remote(...), as with Ray")

    def _route(self, args: tuple, kwargs: dict, wait: bool) -> Any:
        """Hand this call to the policy's router (its fields checked first): the ObjectRef once
        placed (``wait``), else a Future of it. What does not change between calls -- the
        runtime, the fields' check against its policy, the per-node bound functions -- is
        looked up once, not per task."""
        rt = registered(self._policy) or runtime_of(self._policy)
        if self._checked is not rt:
            # (fields the operator bound to the job take its values: see ray_adaptive.runtime.tenancy)
            fields = apply_bound(rt.bound, self._task, self._policy) if rt.bound else self._task
            check_task_fields(rt.policy, fields, f"task for policy {self._policy!r}")
            self._fields, self._checked = fields, rt
        bound = self._bound_per_node(rt)

        def launch(node_id: str) -> Any:
            fn = bound.get(node_id)
            if fn is None:  # a node that joined after this call was made (see PolicyRuntime.follow_cluster)
                fn = self._bound_per_node(rt)[node_id]
            return fn(args, kwargs)

        # (the fields are this object's own copy, read-only from here: every task shares them)
        # (``bound``'s identity: tasks Ray queues alike, one function and options; see runtime.harvest)
        if wait:
            return rt.router.call(self._fields, launch, self._deadline_s, id(bound), self._demand, self._preemptible)
        return rt.router.submit(self._fields, launch, self._deadline_s, id(bound), self._demand, self._preemptible)

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


def policy(name: str):
    """Decorate a ``@ray.remote`` function so that policy ``name`` places its tasks -- or a ``@ray.remote``
    class, so that it places its actors (:class:`~ray_adaptive.api.actor_class.PolicyActorClass`).

    Put it above ``@ray.remote``::

        @ra.policy("drf_lb")
        @ray.remote(num_cpus=1)
        def work(x): ...
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"@ra.policy takes a policy name, got {name!r}")

    def wrap(remote_fn: Any) -> Any:
        if isinstance(remote_fn, ActorClass):  # actors: only their creation is placed (see api.actor_class)
            from ray_adaptive.api.actor_class import PolicyActorClass

            return PolicyActorClass(remote_fn, name)
        if not isinstance(remote_fn, RemoteFunction):
            raise TypeError(
                f"@ra.policy({name!r}) must decorate a @ray.remote function or class (put it above @ray.remote); "
                f"got {remote_fn!r}"
            )
        return PolicyFunction(remote_fn, name)

    return wrap
