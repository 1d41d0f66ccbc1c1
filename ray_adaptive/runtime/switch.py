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
   its decider's holdings to its router: a decentralized decider pushes its
   replica's last changes; a selector's client lets its call in flight land,
   gives back a lease it holds, and waits until the finish notifications it
   sent were applied. Submissions and finishes wait in the router meanwhile.
   Each process *acks*; the coordinator waits for every registered process
   -- those registered with a store incarnation that died too: they register
   again and ack -- and takes for dead one silent for ``ack_timeout_s``, or
   at once one whose Ray worker died.
3. **Collect** the State from the authority of the plan in force: the
   frozen selector (decisions no process received are undone, as the
   hybrid undoes a task dropped at its deadline: OnFinish runs), the
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


def _freeze_all(store: Actor, generation: int, ack_timeout_s: float) -> Tuple[List[str], str]:
    """Announce ``generation`` until every registered process acked under one store incarnation (a
    store that restarts forgets the acks); return the processes that never acked, and that incarnation.
    Processes known dead -- their job ended, their Ray worker died -- are not waited for (they never ack:
    every switch until their eviction would last the whole ``ack_timeout_s``); the job watch evicts them."""
    deadline = time.monotonic() + ack_timeout_s
    while True:  # (each answer names the store's incarnation: no round trip of its own to ask it)
        left = max(0.0, deadline - time.monotonic())
        clients, incarnation, missing = _retry(lambda: store.announce.remote(generation, min(left, DEAD_CHECK_S)),
                                               "the state store")
        acked_by = incarnation
        while missing and left > DEAD_CHECK_S and not _all_dead(store, missing):
            left = max(0.0, deadline - time.monotonic())
            missing, acked_by = _retry(lambda: store.wait_acks.remote(generation, clients, min(left, DEAD_CHECK_S)),
                                       "the state store")
            if acked_by != incarnation:
                break
        if acked_by == incarnation:
            return missing, incarnation
        log.warning("ray-adaptive: the state store restarted during a live switch: announcing again")


def _all_dead(store: Actor, clients: List[str]) -> bool:
    """Whether every one of ``clients`` is known dead: its job ended, or its Ray worker died (what the
    owner's job watch evicts it for)."""
    try:
        dead = {c for gone in find_dead(store, keep="").values() for c in gone}
    except Exception:  # (the store restarts: the acks are asked for again anyway)
        return False
    return set(clients) <= dead


def _get_or_retry(ref: Any, call: Callable[[], Any], what: str) -> Any:
    """``ray.get(ref)`` of a call already made (``call()`` made it), or :func:`_retry` of it if its actor
    was restarting."""
    try:
        return ray.get(ref, timeout=60.0)
    except (ray.exceptions.ActorUnavailableError, ray.exceptions.ActorDiedError):
        return _retry(call, what)


def _collect(old: Topology, store: Actor, incarnation: str) -> Tuple[Optional[dict], bool]:
    """The State of the plan in force, and whether it is exact (see the module doc). Every process
    pushed its replica's last changes before it acked, so the store's snapshot is asked for at once,
    beside the selector's freeze -- except a hybrid's, whose placements push theirs when they freeze."""
    snapshot = store.snapshot.remote
    early = snapshot() if old.selector is None or not old.plan.local_state else None
    state: Optional[dict] = None
    exact = True
    if old.selector is not None:
        try:
            out = ray.get(old.selector.freeze.remote(), timeout=60)
            state, exact = out["state"], out["exact"]
        except Exception:  # it died: its State is gone
            state, exact = None, False
        if exact and old.plan.local_state:
            try:  # the hybrid's placements keep replicas of what the node part reads: their last changes
                ray.get([p.freeze.remote() for p in old.placements], timeout=60)
            except Exception:
                exact = False
    merged, now, restarted = (_get_or_retry(early, snapshot, "the state store") if early is not None
                              else _retry(snapshot, "the state store"))
    if restarted or now != incarnation:
        # the store restarted since the plan in force began (or during this switch): a process that had not
        # registered again when the switch was announced was not waited for -- its replica's last changes
        # never reach the store, its finish notifications may reach the frozen selector after its State
        # was taken -- so the State is rebuilt from every process's tasks instead (each process, late or
        # not, rebuilds its share when it takes up the new generation)
        return None, False
    if not exact:
        return None, False
    if state is None:  # (no selector: the replicas' State)
        return merged, True
    if not old.plan.local_state:  # (the selector holds it all)
        return state, True
    where = dict(old.plan.plan.state)
    for var, value in merged.items():
        if "selector" not in where.get(var, "selector"):
            state[var] = value
    return state, True


def switch(old: Topology, plan: LoweredPlan, *, ack_timeout_s: float = ACK_TIMEOUT_S,
           on_phase: Optional[Callable[[str, Topology], None]] = None, rebuild: bool = False,
           nodes: Optional[List[NodeState]] = None, slots: Optional[Dict[str, str]] = None,
           spare: Optional[SpareGeneration] = None) -> Tuple[Topology, dict]:
    """Replace ``old`` (a :class:`~ray_adaptive.runtime.topology.Topology`) by ``plan`` live; return the new
    topology and what happened (``build_s``: the next generation's actors started, ``from_spare`` of them
    started ahead; ``prepare_s``: the
    processes made their side of it; ``freeze_s``: announce to publish, and ``freeze_steps_s`` where it went:
    ``acks`` every process frozen, ``collect`` the State taken, ``publish`` the new generation in force --
    ``install_s``: the State in the new selector, beside the publish; ``exact``; ``unacked`` processes).
    ``on_phase(name, topology)`` is called after each step (built, frozen, collected, published).
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
    unacked, incarnation = _freeze_all(store, generation, ack_timeout_s)
    acked = time.perf_counter()
    phase("frozen", new)
    state, exact = (None, False) if rebuild else _collect(old, store, incarnation)
    collected = time.perf_counter()
    phase("collected", new)
    if not exact:
        state = None
    new.rebuild = not exact
    selector = new.selector
    # the new selector gets its State while the store publishes: a process that resumes first waits in
    # its first exchange until the State is in (the selector answers none before)
    install = (lambda: selector.install.remote(state)) if selector is not None else None
    installing = install() if install is not None else None
    _retry(lambda: store.publish.remote(new.config(), {**new.initial_state(), **(state or {})}, new.merge_rules()),
           "the state store")
    published = time.perf_counter()
    if install is not None:
        _get_or_retry(installing, install, "the new selector")
    installed = time.perf_counter()
    freeze_s = published - start
    phase("published", new)
    old.retire()
    if unacked:
        waited = acked - start
        log.warning("ray-adaptive: processes %s did not freeze for the switch to %r: taken for dead after %.1f s "
                    "(%s)", unacked, plan.name, waited,
                    f"silent for the ack timeout, {ack_timeout_s:g} s" if waited >= ack_timeout_s - DEAD_CHECK_S
                    else "their job ended or their Ray worker died")
    return new, {"freeze_s": freeze_s, "build_s": built_s, "from_spare": new.from_spare, "prepare_s": prepare_s,
                 "exact": exact, "unacked": unacked,
                 "freeze_steps_s": {"acks": acked - start, "collect": collected - acked, "publish": published - collected},
                 "install_s": installed - collected}
