"""The generic topology builder: a plan's roles become Ray actors and in-process schedulers.

One builder for every plan the compiler emits. :func:`role_specs` says which
roles the plan has and what each runs; hosting follows from the roles alone:

* a **state store** actor always (named ``ra-<policy>-store``): the registry
  any process joins the runtime through, and where replicas push State
  deltas and heartbeats of their loads;
* a ``selector`` role becomes one **selector actor** (named
  ``ra-<policy>-selector``); submitting processes are its clients, batching
  tasks and finish notifications into one call (:class:`RemoteDecider`);
* a ``schedulers`` role next to a selector becomes k **placement actors**,
  each pinned to a node (hard node affinity), fed by the selector;
* a ``schedulers`` role alone (decentralized) runs **in each submitting
  process** (:class:`LocalDecider`), like Ray Serve's caller-side router:
  the decision is made where the task is submitted, on a replica of State
  synced through the store, so no actor sits in the launch path.

Whatever the plan, the submitting process launches each decided task
itself with its node's slot resource (:mod:`ray_adaptive.runtime.binding`)
and owns its result.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from ray_adaptive.runtime.actors import Placement, Selector, StateStore, _Member, make_scheduler
from ray_adaptive.runtime.roles import RoleSpec, lease_spec, role_specs
from ray_adaptive.runtime.scheduler import TaskState
from ray_adaptive.sim.plans import SimPlan
from ray_adaptive.sim.replicas import copy_state

__all__ = ["Topology", "build", "join", "LocalDecider", "RemoteDecider", "NAMESPACE"]

NAMESPACE = "ray_adaptive"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def actor_name(policy_name: str, role: str) -> str:
    return f"ra-{_SAFE.sub('_', policy_name)}-{role}"


def new_client_id() -> str:
    return f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


@dataclass
class Topology:
    """The actors of one running plan (handles), and how processes join it."""

    plan: SimPlan
    specs: Dict[str, RoleSpec]
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

    def decider(self) -> "LocalDecider | RemoteDecider":
        """This process's way of getting decisions."""
        if self.selector is not None:
            return RemoteDecider(self.selector, lease_spec(self.plan), self.nodes, self.t0)
        return LocalDecider(self.specs["schedulers"], self.nodes, self.store, self.t0)

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


def build(plan: SimPlan, nodes: Sequence[dict], slots: Dict[str, str], driver_node: str) -> Topology:
    """Start the actors of ``plan`` on the connected cluster (``nodes``: :meth:`NodeState.as_dict`)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    specs = role_specs(plan)
    t0 = time.time()
    name = plan.policy.name
    replicated = specs.get("schedulers")
    merge = replicated.merge if replicated is not None else None
    initial = make_scheduler(replicated or specs["selector"], nodes).interp.state
    near_driver = NodeAffinitySchedulingStrategy(driver_node, soft=True)
    config = {"plan": plan, "nodes": list(nodes), "slots": dict(slots), "t0": t0}
    store = ray.remote(StateStore).options(  # restarted if its process dies (see StateStore)
        name=actor_name(name, "store"), namespace=NAMESPACE, num_cpus=0, max_concurrency=32,
        max_restarts=-1, scheduling_strategy=near_driver).remote(config, initial, merge)
    placements, selector = [], None
    if "selector" in specs:
        if "schedulers" in specs:
            k = plan.k(len(nodes))
            placements = [
                ray.remote(Placement).options(
                    num_cpus=0, name=actor_name(name, f"placement-{i}"), namespace=NAMESPACE,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[i % len(nodes)]["id"], soft=False),
                ).remote(i, specs["schedulers"], list(nodes), store, t0)
                for i in range(k)
            ]
        selector = ray.remote(Selector).options(  # restarted if its process dies (see Selector)
            name=actor_name(name, "selector"), namespace=NAMESPACE, num_cpus=0, max_concurrency=64,
            max_restarts=-1, scheduling_strategy=near_driver,
        ).remote(specs["selector"], list(nodes),
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
    if "selector" in specs:
        selector = ray.get_actor(actor_name(policy_name, "selector"), namespace=NAMESPACE)
    return Topology(cfg["plan"], specs, cfg["nodes"], cfg["slots"], cfg["t0"], store, selector)


def _ping(actor, record: Callable[[float], None]) -> None:
    """Call ``actor.ping`` and, when it answers, ``record`` the round trip (seconds). Never waits:
    an actor slow to answer delays nothing but its own figure."""
    start = time.perf_counter()

    def answered(future) -> None:
        if future.exception() is None:
            record(time.perf_counter() - start)

    actor.ping.remote().future().add_done_callback(answered)


class LocalDecider:
    """Decisions in this process (a decentralized scheduler): a replica of State, synced through the store."""

    remote = False
    thread_safe = False  # the router calls it under its lock
    SYNC_FLOOR_S = 0.01

    def __init__(self, spec: RoleSpec, nodes: Sequence[dict], store, t0: float):
        self.client = new_client_id()
        self._t0 = t0
        self.sched = make_scheduler(spec, nodes, seed=hash(self.client) & 0xFFFF)
        # a store round trip per decision batch ("probe", "store per decision") would put an actor
        # back in the launch path: a submitting process syncs at most every SYNC_FLOOR_S
        self._m = _Member(f"caller-{self.client}", spec, self.sched, store, floor_s=self.SYNC_FLOOR_S)
        self._dirty = False  # finishes the store has not heard of

    def now(self) -> float:
        return time.time() - self._t0

    def submit(self, tasks: Sequence[TaskState]) -> List[TaskState]:
        now = self.now()
        for t in tasks:
            self.sched.add(t, now)
        return self.decide()

    def finished(self, ids: Sequence[str]) -> List[TaskState]:
        now = self.now()
        for tid in ids:
            self.sched.finish(tid, now)
        self._dirty = self._dirty or bool(ids)
        return self.decide()

    def _refresh(self) -> None:
        """Apply a sync's answer; start the next one (never waiting for it) while tasks wait here
        or the store has not heard of this process's finishes."""
        want = bool(self.sched.pending) or self._dirty
        pushes = self._m.pushes
        self._m.refresh(want)
        if self._m.pushes != pushes:
            self._dirty = False

    def decide(self) -> List[TaskState]:
        self._refresh()
        return self.sched.decide(self.now())

    def tick(self) -> List[TaskState]:
        """Called by the dispatcher thread: while tasks wait, a heartbeat may show room that finishes
        elsewhere made; with nothing pending, the store still learns of this process's finishes
        (else other processes would keep seeing those slots taken)."""
        self._refresh()
        return self.sched.decide(self.now()) if self.sched.pending else []

    def mark_dead(self, node_id: str) -> None:
        n = self.sched.by_id.get(node_id)
        if n is not None:
            n.alive = False

    def node_ids(self) -> List[str]:
        return [n.id for n in self.sched.nodes]

    def decision_latencies(self) -> List[float]:
        return list(self.sched.decision_s)

    def ping(self, record: Callable[[float], None]) -> None:
        """Time an empty call to the actor this process's scheduler talks to (the store); see :func:`_ping`."""
        _ping(self._m.store, record)

    def store_latencies(self) -> List[float]:
        """Round trips of this process's recent syncs with the state store (seconds)."""
        return list(self._m.sync_s)

    @property
    def pending(self) -> int:
        return self.sched.pending

    def export(self) -> dict:
        return self.sched.export()

    def close(self) -> None:
        import ray

        try:
            ray.get(self._m.store.leave.remote(self._m.member), timeout=5)
        except Exception:
            pass


class RemoteDecider:
    """Decisions by the selector actor: tasks go in batches, one call in flight.

    While a call is in flight, new submissions accumulate; the next call
    carries them all, so a loop of submissions costs one round trip per
    batch, not per task. Finish notifications go as they are collected (one
    call per batch of completions), fire and forget.

    While this process holds the selector's lease (see :class:`Selector`),
    ``lease_spec``'s scheduler runs here instead (``local``): the whole
    policy over every node, so ``.remote()`` decides in the caller's thread,
    and the client thread only keeps the long poll through which a recall
    comes. (``lease_spec`` None: the selector never leases.)

    **A restarted selector** knows nothing of this process's tasks. Each
    answer names the selector's incarnation; when it changes, the next call
    sends every task still undecided again, and the tasks decided and not
    finished as a ``rebuild`` handback (with the nodes seen dead), so the
    new selector counts their room and rebuilds State by their OnDispatch.
    A task is launched once: only on the first decision for it. A process
    with tasks running and nothing to submit would see no answer, so it
    asks every ``IDLE_CHECK_S`` (an empty exchange): the running tasks go
    back within that of the restart, well inside the restarted selector's
    ``LEASE_QUIET_S`` (no lease before the handbacks), and not only when
    the process next submits -- until then, their room would be free there.
    """

    thread_safe = True  # locks itself (its client thread shares it)
    IDLE_CHECK_S = 0.25

    def __init__(self, selector, lease_spec: Optional[RoleSpec], nodes: Sequence[dict], t0: float):
        self.client = new_client_id()
        self._lease_spec = lease_spec
        self._nodes = list(nodes)
        self._node_ids = [n["id"] for n in nodes]
        self._dead: set = set()
        self._t0 = t0
        self._selector = selector
        self._cond = threading.Condition()
        self._out: List[TaskState] = []
        self._sent: Dict[str, TaskState] = {}  # submitted, not decided yet
        self._running: Dict[str, TaskState] = {}  # decided by the selector (or handed back to it), not finished
        self._incarnation: Optional[str] = None  # of the selector that answered last
        self._resync = False  # the selector restarted: send it what it lost
        self._local = None  # the selector's scheduler, while this process holds its lease
        self._lease_incarnation: Optional[str] = None  # of the selector that granted it
        self._local_latencies: deque = deque(maxlen=100_000)  # its decisions' latencies, over every lease
        self._held_finishes: Optional[List[str]] = None  # finishes waiting for a handback to land
        self._closed = False
        self.on_decided: Callable[[List[TaskState]], None] = lambda tasks: None
        self.exchanges = itertools.count()
        self.leases = 0
        self._thread = threading.Thread(target=self._run, name="ra-selector-client", daemon=True)
        self._thread.start()

    @property
    def remote(self) -> bool:
        """Whether decisions come from the selector actor (else from this process, under a lease)."""
        return self._local is None

    def now(self) -> float:
        return time.time() - self._t0

    def submit(self, tasks: Sequence[TaskState]) -> List[TaskState]:
        with self._cond:
            if self._local is not None:
                now = self.now()
                for t in tasks:
                    self._local.add(t, now)
                return self._local.decide(now)
            self._out.extend(tasks)
            self._cond.notify()
        return []

    def finished(self, ids: Sequence[str]) -> List[TaskState]:
        if not ids:
            return []
        with self._cond:
            for tid in ids:
                self._running.pop(tid, None)
            if self._local is not None:
                now = self.now()
                for tid in ids:
                    self._local.finish(tid, now)
                return self._local.decide(now)
            if self._held_finishes is not None:  # a handback is on its way: these must not overtake it
                self._held_finishes.extend(ids)
                return []
        # its own call, not queued behind the long poll in flight: the room it frees may be
        # exactly what that poll waits for
        self._selector.finished.remote(list(ids))
        return []

    def tick(self) -> List[TaskState]:
        return []

    def _run(self) -> None:
        import ray

        while True:
            with self._cond:
                while not (self._out or self._sent or self._local is not None or self._resync) and not self._closed:
                    if not self._running:
                        self._cond.wait()
                    elif not self._cond.wait(self.IDLE_CHECK_S):
                        break  # idle with tasks running: is the selector the one that knows them?
                if self._closed:
                    return
                leased = self._local is not None
                out, self._out = ([], self._out) if leased else (self._out, [])
                for t in out:
                    self._sent[t.id] = t
                rebuild = None
                if self._resync and not leased:  # the selector restarted: all it lost of ours, again
                    out = list(self._sent.values())
                    rebuild = {"running": list(self._running.values()), "dead": sorted(self._dead), "rebuild": True}
                    self._held_finishes = []  # finishes must not overtake the handback
            try:
                try:
                    reply = ray.get(self._selector.exchange.remote(self.client, out, rebuild))
                finally:
                    if rebuild is not None:
                        self._release_held_finishes()
                next(self.exchanges)
                # recalled -- or no longer the holder at all (the selector gave up on us): hand back
                if leased and reply.get("recall", True):
                    reply = self._hand_back()
            except Exception:  # the selector died (it restarts; the next answer says so) or is shut down
                with self._cond:
                    if self._closed:
                        return
                time.sleep(0.05)
                continue
            with self._cond:
                if rebuild is not None:
                    self._resync = False
                seen = reply.get("incarnation")
                if seen is not None:
                    if self._incarnation is not None and seen != self._incarnation:
                        self._resync = True  # (this answer's decisions still count: the new one made them)
                        self._cond.notify()
                    self._incarnation = seen
            if "lease" in reply:
                decided = self._take_lease(reply)
            else:
                decided, stray = [], []
                with self._cond:
                    for tid, node in reply.get("decisions", []):
                        t = self._sent.pop(tid, None)
                        if t is None:  # decided already (sent again after a restart): launch it once
                            stray.append(tid)
                            continue
                        t.node = node
                        if node is not None:
                            self._running[tid] = t
                        decided.append(t)
                if stray:  # the room the second decision holds goes back
                    self._selector.finished.remote(stray)
            if decided:
                self.on_decided(decided)

    def _take_lease(self, reply: dict) -> List[TaskState]:
        """Become the selector: its State, this process's tasks back, decided here from now on."""
        with self._cond:
            local = make_scheduler(self._lease_spec, self._nodes)
            local.decision_s = self._local_latencies
            local.interp.state.update(reply["lease"]["state"])
            for n in local.nodes:
                n.alive = n.id not in self._dead and n.id not in reply["lease"]["dead"]
            now = self.now()
            # every undecided task of ours: the selector leases only with nothing pending or
            # running, so none is there (those sent to an incarnation that died, too)
            for t in [*self._sent.values(), *self._out]:  # (_out: submitted while the lease was on its way)
                local.add(t, now)
            self._sent, self._out = {}, []
            # running still, decided by an incarnation that died: their room and State, here now
            local.adopt(list(self._running.values()), dispatch_hooks=True, now=now)
            self._running.clear()
            self._resync = False
            self._local = local
            self._lease_incarnation = reply.get("incarnation")
            self.leases += 1
            return local.decide(now)

    def _hand_back(self, with_pending: bool = True) -> dict:
        """Recalled: give the selector State, the running tasks and the pending ones, in one call
        (finishes meanwhile are held until it has landed, so none overtakes it). At close, the
        pending tasks stay behind: the router has cancelled them."""
        import ray

        with self._cond:
            local, self._local = self._local, None
            if local is None:
                return {}
            pending = local.cancel_pending() if with_pending else []
            handback = {"state": copy_state(local.interp.state), "running": local.release_running(),
                        "granted_by": self._lease_incarnation}
            for t in pending:
                self._sent[t.id] = t
            self._running.update((t.id, t) for t in handback["running"])  # the selector's from now on
            self._held_finishes = []
        try:
            return ray.get(self._selector.exchange.remote(self.client, pending, handback))
        finally:
            self._release_held_finishes()

    def _release_held_finishes(self) -> None:
        with self._cond:
            held, self._held_finishes = self._held_finishes, None
        if held:
            self._selector.finished.remote(held)

    def mark_dead(self, node_id: str) -> None:
        with self._cond:
            self._dead.add(node_id)
            if self._local is not None:
                self._local.by_id[node_id].alive = False
        self._selector.mark_dead.remote(node_id)

    def node_ids(self) -> List[str]:
        return list(self._node_ids)

    def decision_latencies(self) -> List[float]:
        import ray

        with self._cond:
            local = list(self._local_latencies)
        return ray.get(self._selector.decision_latencies.remote()) + local

    def ping(self, record: Callable[[float], None]) -> None:
        """Time an empty call to the selector; see :func:`_ping`."""
        _ping(self._selector, record)

    def store_latencies(self) -> List[float]:
        return []  # the selector's clients never sync with the store

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._out) + len(self._sent) + (self._local.pending if self._local is not None else 0)

    def export(self) -> dict:
        with self._cond:
            out = {"pending": [t.export() for t in (*self._sent.values(), *self._out)]}
            if self._local is not None:
                out["lease"] = self._local.export()
            return out

    def close(self) -> None:
        """Stop; a lease goes back to the selector first (other processes may still use it), and the
        selector forgets this process's tasks still pending there (the router has cancelled them)."""
        import ray

        with self._cond:
            leased = self._local is not None
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=5)
        try:
            if leased:
                self._hand_back(with_pending=False)
            ray.get(self._selector.forget.remote(self.client), timeout=5)
        except Exception:
            pass  # the selector is gone (shutdown) or stuck: nothing of ours can be decided there
        with self._cond:
            self._sent.clear()
            self._out.clear()
