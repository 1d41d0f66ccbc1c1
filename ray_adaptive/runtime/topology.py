"""The generic topology builder: a plan's roles become Ray actors and in-process schedulers.

One builder for every plan the compiler emits. :func:`role_specs` says which
roles the plan has and what each runs; hosting follows from the roles alone:

* a **state store** actor always (named ``ra-<policy>-store``): the registry
  any process joins the runtime through, and where replicas push State
  deltas and heartbeats of their loads;
* a ``selector`` role becomes one **selector actor** (named
  ``ra-<policy>-selector``); submitting processes are its clients, batching
  tasks and finish notifications into one call
  (:class:`~ray_adaptive.runtime.selector.SelectorClient`);
* a ``schedulers`` role next to a selector becomes k **placement actors**,
  each pinned to a node (hard node affinity), fed by the selector;
* a ``schedulers`` role alone (decentralized) runs **in each submitting
  process** (:class:`~ray_adaptive.runtime.local.LocalDecider`), like Ray Serve's caller-side router:
  the decision is made where the task is submitted, on a replica of State
  synced through the store, so no actor sits in the launch path.

Whatever the plan, the submitting process launches each decided task
itself with its node's slot resource (:mod:`ray_adaptive.runtime.binding`)
and owns its result.
"""

from __future__ import annotations

import itertools
import re
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Union

from ray_adaptive.plan import LoweredPlan, Role, RoleSpec, lease_spec, role_specs
from ray_adaptive.runtime.local import LocalDecider
from ray_adaptive.runtime.placement import Placement
from ray_adaptive.runtime.selector import Selector, SelectorClient
from ray_adaptive.runtime.store import StateStore

__all__ = ["Topology", "build", "join", "NAMESPACE", "actor_name"]

NAMESPACE = "ray_adaptive"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def actor_name(policy_name: str, role: str) -> str:
    """The name of a policy's actor in :data:`NAMESPACE` (``role``: store, selector, placement-<i>)."""
    return f"ra-{_SAFE.sub('_', policy_name)}-{role}"


@dataclass
class Topology:
    """The actors of one running plan (handles), and how processes join it."""

    plan: LoweredPlan
    specs: Dict[Role, RoleSpec]
    nodes: List[dict]
    slots: Dict[str, str]  # node id -> slot resource
    t0: float
    store: object
    selector: Optional[object] = None
    placements: List[object] = field(default_factory=list)

    def config(self) -> dict:
        return {"plan": self.plan, "nodes": self.nodes, "slots": self.slots, "t0": self.t0}

    def actors(self) -> list:
        return [a for a in (self.store, self.selector, *self.placements) if a is not None]

    def decider(self) -> Union[LocalDecider, SelectorClient]:
        """This process's way of getting decisions."""
        if self.selector is not None:
            return SelectorClient(self.selector, lease_spec(self.plan), self.nodes, self.t0)
        return LocalDecider(self.specs[Role.SCHEDULERS], self.nodes, self.store, self.t0)

    def placement_nodes(self) -> List[str]:
        import ray

        return ray.get([p.where.remote() for p in self.placements])

    def export(self) -> dict:
        """Queues and State of the actors (the submitting processes export their own)."""
        import ray

        out = {}
        if self.selector is not None:
            out["selector"] = ray.get(self.selector.export.remote())
        if self.placements:
            out["placements"] = ray.get([p.export.remote() for p in self.placements])
        return out

    def close(self) -> None:
        import ray

        for a in self.actors():
            try:
                ray.kill(a)
            except Exception:
                pass  # already gone


def build(plan: LoweredPlan, nodes: Sequence[dict], slots: Dict[str, str], driver_node: str) -> Topology:
    """Start the actors of ``plan`` on the connected cluster (``nodes``: :meth:`NodeState.as_dict`)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    specs = role_specs(plan)
    t0 = time.time()
    name = plan.policy.name
    replicated = specs.get(Role.SCHEDULERS)
    merge = replicated.merge if replicated is not None else None
    initial = (replicated or specs[Role.SELECTOR]).scheduler(nodes).interp.state
    near_driver = NodeAffinitySchedulingStrategy(driver_node, soft=True)
    config = {"plan": plan, "nodes": list(nodes), "slots": dict(slots), "t0": t0}
    store = ray.remote(StateStore).options(  # restarted if its process dies (see StateStore)
        name=actor_name(name, "store"), namespace=NAMESPACE, num_cpus=0, max_concurrency=32,
        max_restarts=-1, scheduling_strategy=near_driver).remote(config, initial, merge)
    placements, selector = [], None
    if Role.SELECTOR in specs:
        if Role.SCHEDULERS in specs:
            k = plan.k(len(nodes))
            placements = [
                ray.remote(Placement).options(
                    num_cpus=0, name=actor_name(name, f"placement-{i}"), namespace=NAMESPACE,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[i % len(nodes)]["id"], soft=False),
                ).remote(i, specs[Role.SCHEDULERS], list(nodes), store, t0)
                for i in range(k)
            ]
        selector = ray.remote(Selector).options(  # restarted if its process dies (see Selector)
            name=actor_name(name, "selector"), namespace=NAMESPACE, num_cpus=0, max_concurrency=64,
            max_restarts=-1, scheduling_strategy=near_driver,
        ).remote(specs[Role.SELECTOR], list(nodes),
                 [(actor_name(name, f"placement-{i}"), NAMESPACE) for i in range(len(placements))], t0,
                 lease=lease_spec(plan) is not None)
    topo = Topology(plan, specs, list(nodes), dict(slots), t0, store, selector, placements)
    ray.get([a.__ray_ready__.remote() for a in topo.actors()])  # fail here, not at the first task
    return topo


JOIN_ATTEMPTS = 300  # (0.1 s apart) while the store restarts


def join(policy_name: str) -> Optional[Topology]:
    """The topology of a policy started by another process (None if none runs)."""
    import ray

    try:
        store = ray.get_actor(actor_name(policy_name, "store"), namespace=NAMESPACE)
    except ValueError:
        return None
    for attempt in itertools.count():
        try:
            cfg = ray.get(store.config.remote())
            break
        except ray.exceptions.ActorUnavailableError:  # restarting (see StateStore): it comes back
            if attempt >= JOIN_ATTEMPTS:
                raise
            time.sleep(0.1)
    selector = None
    specs = role_specs(cfg["plan"])
    if Role.SELECTOR in specs:
        selector = ray.get_actor(actor_name(policy_name, "selector"), namespace=NAMESPACE)
    return Topology(cfg["plan"], specs, cfg["nodes"], cfg["slots"], cfg["t0"], store, selector)
