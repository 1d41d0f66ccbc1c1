"""``@ra.policy(name)`` above ``@ray.remote class C``: actors a running policy places.

Only the creation is scheduled: ``C.options(task={...}).remote(...)`` returns
a real ``ray.actor.ActorHandle`` once the policy has placed the actor, and its
method calls go to it as in Ray. To the policy the actor is a task whose
duration is its lifetime (see :mod:`ray_adaptive.runtime.actor_life` and
docs/language.md, "Actors"): OnArrival at the creation request, Score picks
the node, OnDispatch when it is placed, OnFinish once when it ends --
``ray.kill``, its own exit, its last handle gone, its node's death, its
owner's end. It holds one unit of its node's room (one of the cluster
model's ``executors + queue``: ``get_load(node)`` counts it) for its lifetime,
whatever its ``num_cpus``. An actor with ``max_restarts`` whose node dies is
placed again by the policy: a new arrival, so each placement has its
OnDispatch and its OnFinish.
"""

from __future__ import annotations

import logging
import math
import threading
from concurrent.futures import Future
from typing import Any, Dict, List, Mapping, Optional

from ray.actor import ActorClass
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ray_adaptive._private.actor_watch import actor_id_of, class_default_options
from ray_adaptive.api.fields import check_task_fields
from ray_adaptive.api.lifecycle import registered, runtime_of
from ray_adaptive.api.runtime import PolicyRuntime
from ray_adaptive.errors import ResourceError
from ray_adaptive.plan.fit import demand_of
from ray_adaptive.runtime.actor_life import ActorPlacement, lives_of
from ray_adaptive.runtime.routed import LONG_LIVED
from ray_adaptive.runtime.tenancy import apply_bound

__all__ = ["PolicyActorClass"]

# Options that would take placement away from the policy (get_if_exists: a creation that may create nothing)
_REFUSED = ("scheduling_strategy", "placement_group", "placement_group_bundle_index",
            "placement_group_capture_child_tasks", "get_if_exists")


class PolicyActorClass:
    """A ``@ray.remote`` class whose actors' placement a policy decides. Made by :func:`ray_adaptive.policy`.

    Example::

        @ra.policy("least_loaded")
        @ray.remote(num_cpus=1)
        class Replica:
            def ping(self):
                return ray.get_runtime_context().get_node_id()

        r = Replica.options(task={}).remote()   # a ray.actor.ActorHandle, once placed
        ray.get(r.ping.remote())
        ray.kill(r)                              # the policy's OnFinish runs for it
    """

    def __init__(self, actor_class: ActorClass, policy_name: str, task: Optional[Mapping[str, Any]] = None,
                 options: Optional[Dict[str, Any]] = None, deadline_s: float = math.inf):
        self._cls = actor_class
        self._policy = policy_name
        self._task = dict(task or {})
        self._options = dict(options or {})
        self._deadline_s = deadline_s
        self._checked: Optional[PolicyRuntime] = None
        self._fields: Dict[str, Any] = self._task
        self._demand = demand_of({**class_default_options(actor_class), **self._options})
        # (the router's harvest windows: see runtime.harvest; LONG_LIVED: the monitor records it while it lives)
        self._shape = (LONG_LIVED, id(actor_class))

    def options(self, task: Optional[Mapping[str, Any]] = None, deadline_s: Optional[float] = None,
                **ray_options: Any) -> "PolicyActorClass":
        """Ray's own actor options plus ``task=``, the policy's Task fields, and ``deadline_s``: an actor
        the policy has not placed that many seconds after the request is never created (its
        ``.remote()`` raises :class:`~ray_adaptive.errors.PlacementDeadlineExceeded`)."""
        bad = [k for k in _REFUSED if k in ray_options]
        if bad:
            raise ValueError(f"option {bad[0]!r} conflicts with policy {self._policy!r}, which places the actor "
                             f"itself; leave it out")
        if "preemptible" in ray_options:
            raise ValueError(f"actors of policy {self._policy!r} cannot be preemptible: a policy's Preempt stops "
                             f"plain tasks only (an actor's state would be lost with its process); leave "
                             f"preemptible out, or make the work a @ray.remote function")
        if task is not None and not isinstance(task, Mapping):
            raise TypeError(f"task= must be a dict of the policy's Task fields, got {task!r}")
        if deadline_s is not None and (isinstance(deadline_s, bool) or not isinstance(deadline_s, (int, float))
                                       or not deadline_s > 0):
            raise ValueError(f"deadline_s must be a number of seconds > 0, got {deadline_s!r}")
        rt = registered(self._policy)
        if rt is not None and task:
            check_task_fields(rt.policy, task, f"task for policy {self._policy!r}", partial=True)
        self._cls.options(**ray_options)  # let Ray validate its own options now
        return PolicyActorClass(self._cls, self._policy, {**self._task, **(task or {})},
                                {**self._options, **ray_options},
                                self._deadline_s if deadline_s is None else float(deadline_s))

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Ask the policy to place a new actor; its ``ray.actor.ActorHandle`` once placed and created."""
        return self._route(args, kwargs, wait=True)

    def submit(self, *args: Any, **kwargs: Any) -> Future:
        """Queue the actor's creation; a Future of its ActorHandle (resolved when placed)."""
        return self._route(args, kwargs, wait=False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a policy-decorated actor class is created with .remote(...), as with Ray")

    # -- placing one actor ------------------------------------------------------------------------------
    def _runtime(self) -> PolicyRuntime:
        rt = registered(self._policy) or runtime_of(self._policy)
        if self._checked is not rt:
            fields = apply_bound(rt.bound, self._task, self._policy) if rt.bound else self._task
            check_task_fields(rt.policy, fields, f"task for policy {self._policy!r}")
            self._fields, self._checked = fields, rt
        return rt

    def _route(self, args: tuple, kwargs: dict, wait: bool) -> Any:
        rt = self._runtime()
        made: List[Any] = []  # the handle, handed to the caller (never kept here: see _launch)
        record = ActorPlacement.new(self._policy, rt.router.client, self._place_again)
        lives = lives_of()
        lives.arrived(self._policy)

        def launch(node_id: str) -> Any:
            return self._launch(record, node_id, args, kwargs, made)

        inner = rt.router.submit(self._fields, launch, self._deadline_s, self._shape, self._demand)
        record.task_id = getattr(inner, "task_id", None)
        if wait:  # (a submission rather than Router.call: the task id is known for why_placed)
            inner.result()
            return made.pop()
        outer: Future = Future()
        outer.task_id = record.task_id  # type: ignore[attr-defined]  # (what PolicyRuntime.why_pending asks)

        def done(f: Future) -> None:
            if f.cancelled():
                outer.cancel()
            elif f.exception() is not None:
                outer.set_exception(f.exception())
            else:
                outer.set_result(made.pop())
        inner.add_done_callback(done)
        return outer

    def _launch(self, record: ActorPlacement, node_id: str, args: tuple, kwargs: dict, made: List[Any]) -> Any:
        """Create the actor on ``node_id`` (its binding resource first); the ObjectRef of its end."""
        lives = lives_of()
        lives.bind(record, node_id)
        try:
            user_resources = self._options.get("resources") or class_default_options(self._cls).get("resources") or {}
            options = {k: v for k, v in self._options.items() if k != "resources"}
            handle = self._cls.options(
                **options, resources={**user_resources, record.resource: 1},
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=True),
            ).remote(*args, **kwargs)
        except BaseException:
            lives.unbind(record, node_id)
            raise
        record.actor_id = actor_id_of(handle)
        made.append(handle)
        return lives.place(record, node_id)

    def _place_again(self, record: ActorPlacement, attempt: int = 1) -> Future:
        """The actor's node died and Ray restarts it: the policy places it again (a new arrival). The node
        just lost may still look alive to this process's decider (its dispatcher looks every
        ``NODE_CHECK_S``): a decision for a dead node (its binding refused) is made again a little later."""
        rt = self._runtime()
        lives = lives_of()
        lives.arrived(self._policy)

        def launch(node_id: str) -> Any:
            lives.bind(record, node_id)
            return lives.place(record, node_id)

        fut = rt.router.submit(self._fields, launch, math.inf, self._shape, self._demand)
        record.task_id = getattr(fut, "task_id", None)

        def done(f: Future) -> None:
            err = None if f.cancelled() else f.exception()
            if isinstance(err, ResourceError) and attempt < _PLACE_AGAIN_ATTEMPTS:
                retry = threading.Timer(_PLACE_AGAIN_AFTER_S, self._place_again, (record, attempt + 1))
                retry.daemon = True
                retry.start()
            elif err is not None:
                log.warning("policy %r: actor %s lost its node and was not placed again: %r", self._policy,
                            record.actor_id, err)
        fut.add_done_callback(done)
        return fut


#: how often an actor that lost its node is decided again when the node chosen died too
_PLACE_AGAIN_ATTEMPTS = 6
_PLACE_AGAIN_AFTER_S = 0.5
log = logging.getLogger(__name__)
