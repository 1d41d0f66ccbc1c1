"""The policy service: one runtime of a policy for the whole cluster, owned by no driver.

``ray-adaptive serve drf_lb`` (or ``ra.start("drf_lb", detached=True)``) starts a
detached actor, ``ra-drf_lb-service``, that owns the policy's runtime as a
driver owns one it starts: it builds the actors (detached too), sets the slot
resources, coordinates live switches, runs the adaptive controller on the
load every attached job reports, and watches the jobs: one that ends leaves
the policy (see :meth:`~ray_adaptive.api.PolicyRuntime.evict`). Any job's
``@ra.policy("drf_lb")`` attaches to it by name; none needs ``ra.start``, and no
driver's end -- not even that of the one that started it -- stops it, or a
switch half-way. ``ray-adaptive stop drf_lb`` (``ra.stop("drf_lb")``) removes it.

The service actor is not restarted should its process die: the policy's
actors and slots, being detached, go on serving the attached jobs; what stops
is what the owner does (switches, the controller, the watch over jobs), and
``ray-adaptive stop`` still removes everything.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Dict, List, Optional

import ray

from ray_adaptive.api.owner import Options, own
from ray_adaptive.dsl.ir import Policy
from ray_adaptive.runtime.binding import SlotBinding
from ray_adaptive.runtime.topology import NAMESPACE, actor_name

__all__ = ["PolicyService", "launch", "find", "stop"]

log = logging.getLogger("ray_adaptive")

READY_TIMEOUT_S = 300.0  # a first start compiles the policy and starts its actors


class PolicyService:
    """The detached actor that owns a policy's runtime (see the module doc)."""

    def __init__(self, policy: Policy, options: Options):
        self._error: Optional[BaseException] = None
        self._bind = dict(options.bind or {})
        try:
            self._rt = own(policy, options, detached=True)
        except BaseException as err:  # (kept for ready(), which raises it as it was: a ValueError stays one)
            self._error = err

    def ready(self) -> Dict[str, Any]:
        """The plan in force and why; raises what made the start fail."""
        if self._error is not None:
            raise self._error
        return {"plan": self._rt.plan.name, "why": self._rt.why, "holding": self._rt.holding, "bind": self._bind}

    def switch(self, plan: Any, reason: str = "forced") -> dict:
        """A live switch, made here, whoever asked for it."""
        return self._rt.switch(plan, reason)

    def history(self) -> List[dict]:
        return self._rt.history

    def export(self) -> dict:
        """Queues and State of the plan in force's schedulers (see :meth:`PolicyRuntime.export`)."""
        return self._rt.export()

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the runtime: its actors and slots are removed (the caller then kills this actor)."""
        if self._error is None:
            self._rt.shutdown(timeout)


def find(name: str) -> Any:
    """The service actor of policy ``name`` (None: no service runs it)."""
    try:
        return ray.get_actor(actor_name(name, "service"), namespace=NAMESPACE)
    except ValueError:
        return None


def launch(policy: Policy, options: Options, timeout_s: float = READY_TIMEOUT_S) -> Dict[str, Any]:
    """Start ``policy``'s service on the connected cluster and wait until it serves; return its plan and why."""
    service: Any = ray.remote(PolicyService).options(  # (Ray's stubs type the handle loosely)
        name=actor_name(policy.name, "service"), namespace=NAMESPACE, lifetime="detached", num_cpus=0,
        max_concurrency=16, max_restarts=0,
    ).remote(policy, options)
    try:
        return ray.get(service.ready.remote(), timeout=timeout_s)
    except BaseException:
        ray.kill(service, no_restart=True)
        sweep(policy.name)  # (what a half-made start left: detached actors would outlive it)
        raise


def stop(name: str, timeout_s: float = 60.0) -> bool:
    """Stop policy ``name``'s runtime on the cluster, whoever owns it: the service (its tasks running now
    finish first, up to ``timeout_s``), or what is left of a runtime whose owner died. Afterwards no actor
    of the policy and no slot resource of it is left on any node. Returns whether anything ran."""
    service = find(name)
    found = service is not None
    if service is not None:
        try:
            ray.get(service.stop.remote(timeout_s), timeout=timeout_s + 60)
        except Exception:  # (it died: the sweep removes what it owned)
            log.warning("ray-adaptive: the service of policy %r did not stop cleanly", name, exc_info=True)
        ray.kill(service, no_restart=True)
    return sweep(name) or found


def sweep(name: str) -> bool:
    """Kill every actor of policy ``name`` and remove its slot resources from every node; whether any was found."""
    from ray_adaptive import resources

    base = re.escape(actor_name(name, "store")[:-len("store")])  # ra-<policy>-, as actor_name spells it
    ours = re.compile(base + r"(store|service|selector(-g\d+)?|placement-\d+(-g\d+)?)$")
    actors = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
              if a.get("namespace") == NAMESPACE and ours.match(a["name"])]
    for actor in sorted(actors, key=lambda a: a.endswith("-store")):  # (the store last: it forgets the plan first)
        try:
            handle = ray.get_actor(actor, namespace=NAMESPACE)
            if actor.endswith("-store"):
                ray.get(handle.forget_durable.remote(), timeout=10)
            ray.kill(handle, no_restart=True)
        except (ValueError, ray.exceptions.RayError):
            pass  # gone meanwhile
    slot = re.compile(r"ra-" + re.escape(SlotBinding.tag(name)) + r"-slot-\d+$")
    removed = False
    for node, names in resources.get_cluster_state().items():
        mine = {n: 0 for n in names if slot.match(n)}
        if mine:
            resources.set_resources(mine, node_spec=node)
            removed = True
    return bool(actors) or removed
