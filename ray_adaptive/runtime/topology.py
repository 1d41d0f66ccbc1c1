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

The store lives as long as the runtime; the selector and placement actors
belong to one *generation* of the plan: a live switch builds the next
generation's beside them and retires them (:mod:`ray_adaptive.runtime.switch`).
"""

from __future__ import annotations

import itertools
import re
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ray_adaptive._private.actors import wait_ready
from ray_adaptive.plan import LoweredPlan, NodeState, Role, RoleSpec, lease_spec, role_specs
from ray_adaptive.runtime.decider import Decider
from ray_adaptive.runtime.local import LocalDecider
from ray_adaptive.runtime.messages import Actor
from ray_adaptive.runtime.placement import Placement
from ray_adaptive.runtime.selector import Selector
from ray_adaptive.runtime.selector_client import SelectorClient
from ray_adaptive.runtime.spare import SpareGeneration
from ray_adaptive.runtime.store import StateStore

__all__ = ["Topology", "build", "join", "NAMESPACE", "actor_name"]

NAMESPACE = "ray_adaptive"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def actor_name(policy_name: str, role: str, generation: int = 0) -> str:
    """The name of a policy's actor in :data:`NAMESPACE` (``role``: store, selector, placement-<i>; a
    plan a live switch put in force names its actors with its generation: selector-g1)."""
    return f"ra-{_SAFE.sub('_', policy_name)}-{role}" + (f"-g{generation}" if generation else "")


@dataclass
class Topology:
    """The actors of one generation of a running plan (handles), and how processes join it. The plan's
    roles (``specs``) and what a lease holder runs (``lease``) are read off the plan once, when made."""

    plan: LoweredPlan
    nodes: List[NodeState]
    slots: Dict[str, str]  # node id -> slot resource
    t0: float
    store: Actor
    selector: Optional[Actor] = None
    placements: List[Actor] = field(default_factory=list)
    generation: int = 0
    rebuild: bool = False  # its State could not be handed over: the processes rebuild it (see switch)
    driver_node: str = ""  # where the selector starts (near the process that built the topology)
    records: int = 0  # decisions each scheduler keeps to explain them (see ray_adaptive.plan.explain)
    overflow: bool = False  # Ray's queue holds a full cluster's tasks (see ray_adaptive.plan.holding)
    found: bool = True  # its placement actors were looked up (see from_config)
    detached: bool = False  # its actors are owned by no process (a policy service: see ray_adaptive.api.service)
    from_spare: int = 0  # of its actors, those started ahead as a spare (see ray_adaptive.runtime.spare)
    specs: Dict[Role, RoleSpec] = field(init=False)
    lease: Optional[RoleSpec] = field(init=False)

    def __post_init__(self) -> None:
        self.specs = role_specs(self.plan, self.overflow)
        self.lease = lease_spec(self.plan, self.overflow, self.specs)

    def initial_state(self) -> dict:
        """The policy's State before any task: where a generation begins when none is handed over."""
        spec = self.specs.get(Role.SCHEDULERS) or self.specs[Role.SELECTOR]
        return spec.scheduler(self.nodes).interp.state

    def merge_rules(self) -> Optional[Dict[str, str]]:
        """How the store merges the replicas' State changes (None: no replicas, the selector's State is exact)."""
        spec = self.specs.get(Role.SCHEDULERS)
        return spec.merge if spec is not None else None

    def config(self) -> dict:
        """What a process needs to join this generation (kept by the store)."""
        name, g = self.plan.policy.name, self.generation
        selector = Role.SELECTOR in self.specs
        k = self.plan.k(len(self.nodes)) if selector and Role.SCHEDULERS in self.specs else 0
        return {"plan": self.plan, "nodes": self.nodes, "slots": self.slots, "t0": self.t0, "generation": g,
                "rebuild": self.rebuild, "driver_node": self.driver_node, "records": self.records,
                "overflow": self.overflow, "detached": self.detached,
                "selector": actor_name(name, "selector", g) if selector else None,
                "placements": [actor_name(name, f"placement-{i}", g) for i in range(k)],
                # the selector's handle, once started (the first generation's config is made before it):
                # a process taking up a generation mid-switch finds it without a look-up in the GCS.
                # Not kept in the GCS (see StateStore.publish)
                "handles": self.selector}

    @classmethod
    def from_config(cls, cfg: dict, store, find_placements: bool = True) -> "Topology":
        """The topology a config describes (its actors found by name; a placement actor that died for
        good is left out: only the selector talks to them, and it works on without it).
        ``find_placements=False``: looked up when first needed (a submitting process taking up a
        generation mid-switch talks to the selector only: a GCS look-up per placement actor would
        lengthen every switch's pause)."""
        selector = cfg.get("handles") or (_find(cfg["selector"]) if cfg.get("selector") else None)
        if cfg.get("selector") and selector is None:
            raise RuntimeError(f"the selector {cfg['selector']!r} of the plan in force is gone")
        placements = [p for p in map(_find, cfg.get("placements", [])) if p is not None] if find_placements else []
        overflow = cfg.get("overflow", False)
        return cls(cfg["plan"], cfg["nodes"], cfg["slots"], cfg["t0"], store,
                   selector, placements, cfg.get("generation", 0), cfg.get("rebuild", False),
                   cfg.get("driver_node", ""), cfg.get("records", 0), overflow, found=find_placements,
                   detached=cfg.get("detached", False))

    def _placements(self) -> list:
        """The placement actors, looked up now if :meth:`from_config` left them."""
        if not self.found:
            names = self.config()["placements"]
            self.placements, self.found = [p for p in map(_find, names) if p is not None], True
        return self.placements

    def actors(self) -> list:
        return [a for a in (self.store, self.selector, *self._placements()) if a is not None]

    def decider(self, client: str) -> Decider:
        """Process ``client``'s way of getting decisions under this generation."""
        if self.selector is not None:
            return SelectorClient(client, self.selector, self.lease, self.nodes, self.t0, self.records)
        return LocalDecider(client, self.specs[Role.SCHEDULERS], self.nodes, self.store, self.t0, self.generation,
                            self.records)

    def placement_nodes(self) -> List[str]:
        return ray.get([p.where.remote() for p in self._placements()])

    def export(self) -> dict:
        """Queues and State of the actors (the submitting processes export their own)."""
        out = {}
        if self.selector is not None:
            out["selector"] = ray.get(self.selector.export.remote())
        if self._placements():
            out["placements"] = ray.get([p.export.remote() for p in self.placements])
        return out

    def start_actors(self, spare: Optional[SpareGeneration] = None) -> None:
        """Start the selector and placement actors this generation needs and wait until they are up. Those
        of ``spare`` (started ahead for this generation: see :mod:`ray_adaptive.runtime.spare`) are
        configured instead where they serve -- the selector; a placement actor whose node is alive -- and
        the rest of it killed."""
        spare = spare if spare is not None and spare.generation == self.generation else SpareGeneration(self.generation)
        self.from_spare = 0
        specs, nodes, g = self.specs, self.nodes, self.generation
        name, life = self.plan.policy.name, _lifetime(self.detached)
        configured = []
        if Role.SELECTOR in specs:
            if Role.SCHEDULERS in specs:
                alive = _alive_ids()
                self.placements = []
                for i, host in enumerate(self._hosts(alive)):
                    ready, was_on = spare.placements.pop(i, (None, ""))
                    if ready is not None and was_on in alive:  # (a placement actor places wherever it runs)
                        configured.append(ready.configure.remote(i, specs[Role.SCHEDULERS], list(nodes), self.store,
                                                                 self.t0, g, self.records))
                        self.placements.append(ready)
                        self.from_spare += 1
                    else:
                        self.placements.append(_placement_actor(name, i, g, host, life).remote(
                            i, specs[Role.SCHEDULERS], list(nodes), self.store, self.t0, g, self.records))
            if spare.selector is not None:
                self.selector, spare.selector = spare.selector, None
                self.from_spare += 1
                _configure(self.selector, {**self.config(), "handles": None})
            else:
                self.selector = _selector_actor(name, g, self.driver_node, life).remote(
                    specs[Role.SELECTOR], list(nodes),
                    [(actor_name(name, f"placement-{i}", g), NAMESPACE) for i in range(len(self.placements))], self.t0,
                    lease=self.lease is not None, awaiting_state=g > 0, records=self.records,
                    placement_finishes=Role.SCHEDULERS not in specs or specs[Role.SCHEDULERS].finishes)
        spare.kill()  # (what this generation does not use)
        ray.get(configured)
        wait_ready(a for a in (self.selector, *self.placements) if a is not None)

    def _hosts(self, alive: set, more_nodes: int = 0) -> List[str]:
        """The node of each placement actor (by index) -- on ``more_nodes`` nodes more, for a spare --: the
        nodes alive now, in turn (one that left would leave its actor unschedulable, and the switch building
        it would fail)."""
        hosts = [n for n in self.nodes if n.id in alive] or list(self.nodes)
        return [hosts[i % len(hosts)].id for i in range(self.plan.k(len(self.nodes) + more_nodes))] \
            if Role.SCHEDULERS in self.specs and Role.SELECTOR in self.specs else []

    def start_spare(self) -> SpareGeneration:
        """Start, unconfigured, the actors the next generation of this plan would start (see
        :mod:`ray_adaptive.runtime.spare`); not waited for."""
        g, name, life = self.generation + 1, self.plan.policy.name, _lifetime(self.detached)
        spare = SpareGeneration(g)
        if Role.SELECTOR in self.specs:
            # (one more than this generation has, if a node more adds one: the placement actor of a node that
            # joins need not wait for a worker process there -- it starts on that node at the next switch)
            spare.placements = {i: (_placement_actor(name, i, g, host, life).remote(), host)
                                for i, host in enumerate(self._hosts(_alive_ids(), more_nodes=1))}
            spare.selector = _selector_actor(name, g, self.driver_node, life).remote(
                spare=(actor_name(name, "store"), NAMESPACE, g))
        return spare

    def retire(self) -> None:
        """Kill this generation's selector and placement actors (a switch replaced them; the store stays).
        Placement actors this process never looked up are found by name first: an actor is killed, never
        left to go with its handles (a detached one never would, and a driver's lives while a handle does)."""
        for a in (self.selector, *self._placements()):
            if a is not None:
                try:
                    ray.kill(a, no_restart=True)
                except Exception:
                    pass  # already gone

    def abandon(self, timeout_s: float = 10.0) -> None:
        """A generation that failed to start: kill its actors and wait until their names are free again,
        so that a switch to the same plan can make them anew (the names carry the generation)."""
        self.retire()
        cfg = self.config()
        names = [n for n in (cfg["selector"], *cfg["placements"]) if n]
        deadline = time.monotonic() + timeout_s
        while any(_find(n) is not None for n in names) and time.monotonic() < deadline:
            time.sleep(0.05)

    def close(self) -> None:
        """Kill every actor, the store too: the runtime is shut down."""
        try:
            ray.get(self.store.forget_durable.remote(), timeout=10)
        except Exception:
            pass  # the store is gone: so is what it would have brought back
        self.retire()
        try:
            ray.kill(self.store, no_restart=True)
        except Exception:
            pass


def build(plan: LoweredPlan, nodes: Sequence[NodeState], slots: Dict[str, str], driver_node: str,
          records: int = 0, overflow: bool = False, detached: bool = False,
          bind: Optional[Dict[str, str]] = None) -> Topology:
    """Start the actors of ``plan`` on the connected cluster's ``nodes``;
    each scheduler keeps its last ``records`` decisions, to explain them; ``overflow``: Ray's queue
    holds a full cluster's tasks (see :mod:`ray_adaptive.plan.holding`); ``detached``: owned by no
    process (they outlive the one building them); ``bind``: Task fields bound to the submitting
    job (see :mod:`ray_adaptive.runtime.tenancy`)."""
    topo = build_generation(plan, 0, nodes, slots, time.time(), None, driver_node, records, overflow, detached)
    store = ray.remote(StateStore).options(  # restarted if its process dies (see StateStore)
        name=actor_name(plan.policy.name, "store"), namespace=NAMESPACE, num_cpus=0, max_concurrency=256,
        max_restarts=-1, scheduling_strategy=_near(driver_node), **_lifetime(detached),
    ).remote(topo.config(), topo.initial_state(), topo.merge_rules(), bind)
    topo.store = store
    wait_ready([store])
    topo.start_actors()
    return topo


def _configure(selector: Actor, config: dict, timeout_s: float = 60.0) -> None:
    """Configure a spare selector, again while it restarts (a spare whose process died comes back
    unconfigured; Ray answers ActorUnavailableError meanwhile)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            ray.get(selector.configure.remote(config), timeout=timeout_s)
            return
        except ray.exceptions.ActorUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _placement_actor(policy_name: str, index: int, generation: int, host: str, life: dict):
    return ray.remote(Placement).options(
        num_cpus=0, name=actor_name(policy_name, f"placement-{index}", generation), namespace=NAMESPACE, **life,
        scheduling_strategy=NodeAffinitySchedulingStrategy(host, soft=False))


def _selector_actor(policy_name: str, generation: int, driver_node: str, life: dict):
    return ray.remote(Selector).options(  # restarted if its process dies (see Selector)
        name=actor_name(policy_name, "selector", generation), namespace=NAMESPACE, num_cpus=0, max_concurrency=64,
        max_restarts=-1, **life, scheduling_strategy=_near(driver_node))


def _find(name: str):
    """The actor named ``name`` in :data:`NAMESPACE` (None: gone)."""
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


def _alive_ids() -> set:
    """The nodes the GCS says are alive (Ray has no node-event subscription: asked when needed)."""
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


def _lifetime(detached: bool) -> dict:
    return {"lifetime": "detached"} if detached else {}


def _near(node_id: str):
    return NodeAffinitySchedulingStrategy(node_id, soft=True)


def build_generation(plan: LoweredPlan, generation: int, nodes: Sequence[NodeState], slots: Dict[str, str], t0: float,
                     store: Actor, driver_node: str, records: int = 0, overflow: bool = False,
                     detached: bool = False) -> Topology:
    """The topology of ``plan``'s ``generation``: its actors are started by :meth:`Topology.start_actors`
    (generation 0 once the store exists; a later one awaiting the State a switch installs)."""
    return Topology(plan, list(nodes), dict(slots), t0, store, generation=generation, driver_node=driver_node,
                    records=records, overflow=overflow, detached=detached)


JOIN_ATTEMPTS = 300  # (0.1 s apart) while the store restarts


def join(policy_name: str, client: str) -> Optional[Topology]:
    """The topology in force of a policy another process started, with ``client`` registered at its
    store (None if none runs); during a live switch, the one it puts in force."""
    try:
        store = ray.get_actor(actor_name(policy_name, "store"), namespace=NAMESPACE)
    except ValueError:
        return None
    for attempt in itertools.count():
        try:
            ctx = ray.get_runtime_context()
            cfg = ray.get(store.join.remote(client, job=ctx.get_job_id(), worker=ctx.get_worker_id()))
            break
        except ray.exceptions.ActorUnavailableError:  # restarting (see StateStore): it comes back
            if attempt >= JOIN_ATTEMPTS:
                raise
            time.sleep(0.1)
    return Topology.from_config(cfg, store)
