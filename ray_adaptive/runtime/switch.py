"""Live switches: a running plan replaced by another without losing, repeating or stalling a task.

The protocol, between the process that switches (the *coordinator*, the
one that started the runtime), the state store, and every submitting
process (its :class:`PlanWatcher` and router):

1. **Build** the next generation's actors beside the running ones (a
   selector awaiting its State, placement actors): nothing is routed to them.
   The store shows every process the next generation's config; each makes
   its side of it while it still decides (the topology, a decentralized
   plan's decider: no pause counts it) and says so (the coordinator waits
   ``PREPARE_TIMEOUT_S`` at most: a process slow to, makes it at resume).
2. **Freeze.** The store *announces* the generation; each process hears it
   at once (its watcher's long poll on the store), stops deciding and hands
   its decider's holdings to its router: a decentralized decider hands its
   replica's last changes to the ack, which carries them to the store; a
   selector's client lets its call in flight land,
   gives back a lease it holds, and waits until the finish notifications it
   sent were applied. Submissions and finishes wait in the router meanwhile.
   Each process *acks*; the coordinator waits for every registered process
   -- those registered with a store incarnation that died too: they register
   again and ack -- and takes for dead one silent for ``ack_timeout_s``, or
   at once one whose Ray worker died.
3. **Collect** -- the store does, once the last process acked, with no
   round trip through the coordinator (see
   :mod:`~ray_adaptive.runtime.handover`) -- the State from the authority
   of the plan in force: the frozen selector (decisions no process
   received are undone, as the hybrid undoes a task dropped at its deadline: OnFinish runs), the
   store's merged State of the replicas, or both (a hybrid whose placements
   keep replicas). So the State holds the OnArrival of every task still
   undecided and the OnDispatch of every task running.
4. **Install and publish.** The new selector gets that State; the store
   publishes the new generation (config, State, merge rules; kept in the
   GCS so that a restarted store comes back with it), each process's
   running tasks per node (from its ack) counted as its load. Each process
   hears it with all it needs in the one reply -- the config, the State and
   the others' loads -- and resumes:
   a decider of the new plan takes its running tasks (counted, no hooks:
   their OnDispatch is in the State), its undecided ones (no second
   OnArrival), and the submissions and finishes that waited; results stay
   with their callers (they launched the tasks); deadlines keep counting
   (the runtime's clock does not restart).
5. **Retire** the old generation's actors. The slot resources stay: they
   bind decisions to nodes whatever the plan.

When the State cannot be handed over exactly -- the old selector died
during the switch, or a lease was never given back -- the new generation is
published with ``rebuild``: it starts from the initial State and each
process's running tasks rebuild it by their OnDispatch, their undecided
ones by their OnArrival (the recovery a restarted selector already uses).
A crash of the new selector is the restart it already survives; a store
that restarts mid-switch is announced to again.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple

import ray

from ray_adaptive._private.submit import RayGoneError
from ray_adaptive.dsl.ir import Policy
from ray_adaptive.plan import LoweredPlan, NodeState
from ray_adaptive.runtime import audit, background
from ray_adaptive.runtime.decider import Decider
from ray_adaptive.runtime.handover import HANDOVER_WAIT_S, Handover
from ray_adaptive.runtime.job_watch import find_dead
from ray_adaptive.runtime.messages import Actor, SyncAnswer
from ray_adaptive.runtime.spare import SpareGeneration
from ray_adaptive.runtime.topology import Topology, build_generation

__all__ = ["PlanWatcher", "Follower", "SwitchNotStarted", "switch"]

log = logging.getLogger(__name__)

ACK_TIMEOUT_S = 10.0
DEAD_CHECK_S = 0.5  # while processes have not acked, how often the switch asks whether their workers died
PREPARE_TIMEOUT_S = 2.0


class SwitchNotStarted(RuntimeError):
    """A live switch failed before any process stopped deciding: its actors are gone, the plan in force stays."""


class Follower(Protocol):
    """What a :class:`PlanWatcher` drives: its process's :class:`~ray_adaptive.runtime.router.Router`."""

    client: str
    policy: Policy
    topology: Topology

    def freeze(self) -> dict:
        """Stop deciding; what this process holds (for the ack)."""
        ...

    def resume(self, topology: Topology, seen: Optional[SyncAnswer] = None, decider: Optional[Decider] = None) -> None:
        ...

    def explain(self, task_id: str) -> dict: ...

    def stopped_elsewhere(self) -> None:
        """The runtime was stopped on the cluster while this process followed it."""
        ...


class _Stopped(Exception):
    """The watcher was stopped while a long poll was in flight."""


class PlanWatcher:
    """A submitting process's side of live switches: follows the store's generation and phase (a long poll)
    and freezes, acks and resumes its router (see the module doc)."""

    POLL_S = 2.0
    STOP_CHECK_S = 0.1
    # a call to the next generation's actors while preparing waits at most this long: well under the
    # switch's wait for every process to have prepared (PREPARE_TIMEOUT_S), so one that does not answer
    # delays no process's freeze by more
    PREPARE_CALL_S = 0.5

    def __init__(self, router: Follower):
        self._router = router
        self._store = router.topology.store
        self._job = ray.get_runtime_context().get_job_id()
        self.generation = router.topology.generation
        self._stop = threading.Event()
        self._frozen_for: Optional[int] = None
        self._counts: dict = {}
        # (generation, plan name, topology, decider or None)
        self._prepared: Optional[Tuple[int, str, Topology, Optional[Decider]]] = None
        self._thread = threading.Thread(target=self._run, name="ra-plan-watcher", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop following, and wait (``timeout`` s at most) until this thread makes no more calls to Ray:
        a process that exits right after must find none in flight."""
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _run(self) -> None:
        known: Tuple = (self.generation, "running", None)
        while not self._stop.is_set() and ray.is_initialized():  # (never let a call start Ray again)
            try:
                generation, phase, incarnation, requests, news = self._watch(known)
            except (_Stopped, RayGoneError):
                return
            except ray.exceptions.ActorDiedError:  # (a store that crashed restarts: gone for good, it was stopped)
                if not self._stop.is_set():
                    self._router.stopped_elsewhere()
                return
            except Exception:  # the store restarts (or the runtime is shutting down)
                self._stop.wait(0.1)
                continue
            if known[2] is not None and incarnation != known[2]:
                # the store restarted with no process registered: register again (a switch announced to the
                # restarted store waits for this process's ack; the owner's job watch sees this job)
                self._store.join.remote(self._router.client, 0.0, self._job,
                                        ray.get_runtime_context().get_worker_id())
            for rid, task_id in requests:  # an operator asks why (see ray-adaptive why)
                threading.Thread(target=self._explain, args=(rid, task_id), daemon=True).start()
            try:
                self._follow(generation, phase, incarnation, news)
            except Exception:  # never leave a frozen process silent: log, and look again
                log.exception("ray-adaptive: following a live switch of policy %r failed", self._router.policy.name)
                self._stop.wait(0.1)
                continue
            known = (generation, phase, incarnation)

    def _watch(self, known: Tuple) -> tuple:
        """The store's answer to a long poll, looked for every ``STOP_CHECK_S`` so that :meth:`stop` is
        heard at once (a ``ray.get`` cannot be interrupted)."""
        ref = self._store.watch.remote(*known, self.POLL_S, self._router.client)
        deadline = time.monotonic() + self.POLL_S + 30
        while not background.get_ready(ref, self.STOP_CHECK_S):
            if self._stop.is_set() or not ray.is_initialized():
                raise _Stopped
            if time.monotonic() > deadline:
                raise TimeoutError("the state store did not answer a watch")
        return ray.get(ref)

    def _explain(self, rid: str, task_id: str) -> None:
        try:  # (or the State audit's survey: what this process holds)
            result = audit.tasks_held(self._router) if task_id == audit.AUDIT else self._router.explain(task_id)
        except Exception as err:  # (an answer, whatever happens: the asker waits for one)
            result = {"state": "unknown", "why": f"could not explain: {err!r}"}
        self._store.answer.remote(rid, result)

    def _follow(self, generation: int, phase: str, incarnation: str, news: Optional[dict]) -> None:
        router, store = self._router, self._store
        if generation > self.generation:  # published: take up the new plan
            cfg = news["config"] if news else ray.get(store.config.remote())
            if self._frozen_for is None:
                router.freeze()  # (it missed the freeze: taken for dead, its State is not in the handover)
            topo, decider = self._take_prepared(cfg)
            router.resume(topo, news["seen"] if news else None, decider)
            self.generation, self._frozen_for = cfg["generation"], None
        elif phase == "preparing" and news is not None:  # a switch to generation + 1 is coming: make its side
            if self._prepared is None or self._prepared[0] != generation + 1:
                self._prepare(news["next"])
            store.prepared.remote(router.client, generation + 1)
        elif phase == "freezing":  # a switch to generation + 1 is announced (again, after a store restart)
            if self._frozen_for != generation + 1:
                self._counts = router.freeze()
                self._frozen_for = generation + 1
            ray.get(store.ack.remote(router.client, generation + 1, self._counts))

    def _prepare(self, cfg: dict) -> None:
        """Make the next generation's topology -- and a decentralized plan's decider -- while this
        process still decides under the plan in force: no switch's pause counts it. (A selector's
        client is made at resume: it starts talking to its selector at once.)"""
        try:
            topo = Topology.from_config(cfg, self._store, find_placements=False)
            decider = topo.decider(self._router.client) if topo.selector is None else None
        except Exception:  # (made again at resume, where a failure is reported)
            log.debug("ray-adaptive: preparing generation %s failed", cfg.get("generation"), exc_info=True)
            return
        if topo.selector is not None:
            # this process's first call to a new actor waits for its address and opens a channel to it:
            # made now, not as the first exchange after the resume, inside every caller's pause
            try:
                background.get(topo.selector.ping.remote(), timeout=self.PREPARE_CALL_S)
            except Exception:  # (the exchange after the resume reports a selector that does not answer)
                log.debug("ray-adaptive: the next selector did not answer a ping", exc_info=True)
        self._prepared = (cfg["generation"], cfg["plan"].name, topo, decider)

    def _take_prepared(self, cfg: dict) -> Tuple[Topology, Optional[Decider]]:
        """The published generation's topology and decider: the ones prepared for it, or made now."""
        prepared, self._prepared = self._prepared, None
        if prepared is not None and prepared[:2] == (cfg["generation"], cfg["plan"].name):
            topo, decider = prepared[2:]
            topo.rebuild = cfg.get("rebuild", False)  # (decided once the State was collected)
            return topo, decider
        return Topology.from_config(cfg, self._store, find_placements=False), None


def _retry(call: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    """``ray.get(call())``, again while the actor restarts (Ray answers ActorUnavailableError meanwhile)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray.get(call(), timeout=timeout_s)
        except (ray.exceptions.ActorUnavailableError, ray.exceptions.ActorDiedError):
            if time.monotonic() > deadline:
                raise RuntimeError(f"live switch: {what} did not answer for {timeout_s:g} s") from None
            time.sleep(0.05)


def _prepare_all(store: Actor, generation: int, config: dict, timeout_s: float) -> List[str]:
    """Show every process the next generation's config and wait until each made its side of it, at
    most ``timeout_s``: one slow to, makes it when it resumes. Return those that did not."""
    clients = _retry(lambda: store.prepare.remote(generation, config), "the state store")
    return _retry(lambda: store.wait_prepared.remote(generation, clients, timeout_s), "the state store")


def _freeze_all(store: Actor, generation: int, ack_timeout_s: float, handover: Optional[Handover]
                ) -> Tuple[List[str], str, Optional[dict]]:
    """Announce ``generation`` until every registered process acked under one store incarnation (a
    store that restarts forgets the acks); return the processes that never acked, that incarnation and,
    if every one acked and a ``handover`` is given, what the store did once they had: it handed the State
    over and published (see :meth:`~ray_adaptive.runtime.store.StateStore.complete`). Processes known dead
    -- their job ended, their Ray worker died -- are not waited for (they never ack: every switch until
    their eviction would last the whole ``ack_timeout_s``); the job watch evicts them."""
    deadline = time.monotonic() + ack_timeout_s
    while True:  # (each answer names the store's incarnation: no round trip of its own to ask it)
        left = max(0.0, deadline - time.monotonic())
        clients, incarnation, missing, done = _retry(
            lambda: store.announce.remote(generation, min(left, DEAD_CHECK_S), handover), "the state store",
            HANDOVER_WAIT_S)
        acked_by = incarnation
        while missing and left > DEAD_CHECK_S and not _all_dead(store, missing):
            left = max(0.0, deadline - time.monotonic())
            missing, acked_by, done = _retry(
                lambda: store.wait_acks.remote(generation, clients, min(left, DEAD_CHECK_S), handover),
                "the state store", HANDOVER_WAIT_S)
            if acked_by != incarnation:
                break
        if acked_by == incarnation:
            return missing, incarnation, done
        log.warning("ray-adaptive: the state store restarted during a live switch: announcing again")


def _all_dead(store: Actor, clients: List[str]) -> bool:
    """Whether every one of ``clients`` is known dead: its job ended, or its Ray worker died (what the
    owner's job watch evicts it for)."""
    try:
        dead = {c for gone in find_dead(store, keep="").values() for c in gone}
    except Exception:  # (the store restarts: the acks are asked for again anyway)
        return False
    return set(clients) <= dead


def _handover(old: Topology, new: Topology, rebuild: bool) -> Handover:
    """What the store needs to hand ``old``'s State over to ``new``."""
    local = old.selector is not None and old.plan.local_state  # (a hybrid whose placements keep replicas)
    replica_vars = frozenset(v for v, where in dict(old.plan.plan.state).items() if "selector" not in where)
    return Handover(config=new.config(), base=new.initial_state(), merge=new.merge_rules(), rebuild=rebuild,
                    old_selector=old.selector, old_placements=list(old.placements) if local else [],
                    replica_vars=replica_vars if local else None)


def switch(old: Topology, plan: LoweredPlan, *, ack_timeout_s: float = ACK_TIMEOUT_S,
           on_phase: Optional[Callable[[str, Topology], None]] = None, rebuild: bool = False,
           nodes: Optional[List[NodeState]] = None, slots: Optional[Dict[str, str]] = None,
           spare: Optional[SpareGeneration] = None) -> Tuple[Topology, dict]:
    """Replace ``old`` (a :class:`~ray_adaptive.runtime.topology.Topology`) by ``plan`` live; return the new
    topology and what happened (``build_s``: the next generation's actors started, ``from_spare`` of them
    started ahead; ``prepare_s``: the
    processes made their side of it; ``freeze_s``: announce to the store's answer, the new generation in force
    and its selector installed, and ``freeze_steps_s`` where it went, as the store timed it: ``acks`` every
    process frozen, ``collect`` the State taken, ``publish`` the new generation in force -- ``install_s``: the
    State in the new selector, beside the publish; ``exact``; ``unacked`` processes).
    ``on_phase(name, topology)`` is called after each step (built, frozen, published); given, the store
    hands the State over only once it returned from "frozen" (without, in the same call as the last ack).
    ``rebuild``: the State is not collected but rebuilt from the registered processes' tasks (a job
    left: what its tasks held goes with it; see :meth:`ray_adaptive.api.PolicyRuntime.evict`). ``nodes`` and
    ``slots``: the cluster the new generation decides for, when nodes joined or left (default: ``old``'s;
    a node keeps its place in the list, a node that left stays in it, marked not alive: State and
    decisions refer to nodes by place). ``spare``: actors started ahead for the new generation (see
    :mod:`ray_adaptive.runtime.spare`); what it does not use is killed."""
    def phase(name: str, topo: Topology) -> None:
        if on_phase is not None:
            on_phase(name, topo)

    store = old.store
    generation = old.generation + 1
    new = build_generation(plan, generation, nodes if nodes is not None else old.nodes,
                           slots if slots is not None else old.slots, old.t0, store, old.driver_node, old.records,
                           old.overflow, old.detached)
    began = time.perf_counter()
    try:
        new.start_actors(spare)
    except Exception as err:  # (e.g. a node left under a placement actor being started): nothing changed yet
        new.abandon()
        raise SwitchNotStarted(f"the actors of {plan.name!r} did not start ({type(err).__name__}: "
                               f"{str(err).splitlines()[0] if str(err) else ''}); the plan in force stays") from err
    phase("built", new)
    built_s = time.perf_counter() - began
    _prepare_all(store, generation, new.config(), PREPARE_TIMEOUT_S)
    start = time.perf_counter()
    prepare_s = start - began - built_s
    handover = _handover(old, new, rebuild)
    # An ``on_phase`` caller (a test that crashes an actor while every process is frozen) is called between
    # the acks and the handover: the store answers once every process acked, and hands over when asked.
    # Otherwise it hands over in the same call, as soon as the last process acks.
    unacked, incarnation, done = _freeze_all(store, generation, ack_timeout_s, None if on_phase else handover)
    acked = time.perf_counter()
    if done is None:  # (paused for on_phase, or processes never acked: they are taken for dead)
        phase("frozen", new)
        done = _retry(lambda: store.complete.remote(generation, incarnation, handover), "the state store",
                      HANDOVER_WAIT_S)
    published = time.perf_counter()
    exact = done["exact"]
    new.rebuild = not exact
    freeze_s = published - start
    phase("published", new)
    old.retire()
    if unacked:
        waited = acked - start
        log.warning("ray-adaptive: processes %s did not freeze for the switch to %r: taken for dead after %.1f s "
                    "(%s)", unacked, plan.name, waited,
                    f"silent for the ack timeout, {ack_timeout_s:g} s" if waited >= ack_timeout_s - DEAD_CHECK_S
                    else "their job ended or their Ray worker died")
    # (the steps as the store timed them; a store restarted after publishing, before its answer came, did not)
    acks = done.get("acks_s", acked - start)
    steps = {"acks": acks, "collect": done.get("collect_s", 0.0), "publish": done.get("publish_s", freeze_s - acks)}
    return new, {"freeze_s": freeze_s, "build_s": built_s, "from_spare": new.from_spare, "prepare_s": prepare_s,
                 "exact": exact, "unacked": unacked, "freeze_steps_s": steps, "install_s": done.get("install_s")}
