"""The state store actor and its client: where replicas of State meet, and how any process joins a runtime.

* :class:`StateStore` (an actor, one per running policy) holds the merged
  State of the replicas, each member's outstanding tasks per node (the
  heartbeats of a decentralized plan), and the configuration a process
  needs to join the runtime;
* :class:`StoreClient` is a scheduler's side of it: State deltas pushed and
  the merged State pulled in one call that never blocks a decision, with
  a back-off while syncs bring no news, and recovery when the store restarts.
"""

from __future__ import annotations

import threading
import time
import uuid
import warnings
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import ray

from ray_adaptive._private import gcs_kv
from ray_adaptive.plan import RoleSpec, Scheduler
from ray_adaptive.plan.replicas import copy_state, merge_into, same_state
from ray_adaptive.runtime import tenancy
from ray_adaptive.runtime.handover import Handover, assemble, freeze_authority, get_or_again
from ray_adaptive.runtime.messages import SyncAnswer

__all__ = ["StateStore", "StoreClient", "ping"]


class StateStore:
    """The runtime's registry and the schedulers' meeting point: one per running policy, for its whole life.

    * **The plan in force.** ``config()``: everything a process needs to
      join (the lowered plan, its generation, nodes, slot resources, the
      generation's actor names). ``join(client)`` registers a submitting
      process and returns the config; ``leave(client)`` forgets it.
    * **Live switches** (see :mod:`ray_adaptive.runtime.switch`):
      ``announce(generation)`` asks every registered process to freeze;
      each *acks* once it has stopped deciding and handed over what it
      holds; once every process acked, the store hands the State over
      itself (:mod:`~ray_adaptive.runtime.handover`) and publishes the next
      generation -- its config, its State, its merge rules -- and every
      process resumes under it.
      ``watch(...)`` is how processes hear both: a long poll answered at
      once when the phase or generation differs from what the caller knows.
    * **Replicated State.** ``sync(member, delta, outstanding)``: merge a
      replica's State changes, record its outstanding tasks per node (its
      heartbeat), and return the merged State, the *others'* outstanding
      tasks per node and the store's incarnation.
    * **Load reports.** ``report(client, load)`` / ``loads()``: each
      process's recent arrivals, for the adaptive controller and operators.

    Restarted when its process dies (``max_restarts=-1``), it comes back
    with the last published generation (kept in the GCS, not only in its
    constructor's arguments) and that generation's base State, with a new
    incarnation; each member that sees the change pushes its whole
    contribution since the generation began, so the merged State comes back
    (see :class:`StoreClient`). A process frozen for a switch when the store
    restarts is asked again (the coordinator announces again).
    """

    def __init__(self, config: dict, state: dict, merge: Optional[Mapping[str, str]],
                 bind: Optional[Mapping[str, str]] = None):
        """``bind``: Task field -> what the operator bound it to (see :mod:`ray_adaptive.runtime.tenancy`)."""
        durable = gcs_kv.get(self.durable_key(config))
        if durable is not None and durable[0]["generation"] >= config["generation"]:
            config, state, merge = durable  # restarted after a switch: the plan in force now
        self._config = config
        self._base = copy_state(state)  # the generation's State when it began (a restart starts here)
        self._state = copy_state(state)
        self._merge = dict(merge or {})
        self._outstanding: Dict[str, Dict[str, int]] = {}
        # member -> (its StoreClient's id, the number of its last delta merged), in this incarnation
        self._merged: Dict[str, Tuple[str, int]] = {}
        self._clients: Dict[str, float] = {}  # registered processes -> when last heard from
        self._jobs: Dict[str, Tuple[str, float]] = {}  # registered process -> (its Ray job, when it attached)
        self._workers: Dict[str, str] = {}  # registered process -> its Ray worker id (see join)
        # processes registered with an incarnation that died and not heard from since (see _registry): the
        # owner's job watch still sees them, and evicts those whose process died meanwhile
        self._former: Dict[str, float] = {}
        for client, (job, attached, worker) in (gcs_kv.get(self._registry_key()) or {}).items():
            self._former[client] = time.monotonic()
            self._jobs[client] = (job, attached)
            if worker:
                self._workers[client] = worker
        self._bind = dict(bind or {})
        # or "preparing" / "freezing": a switch to generation + 1 shows its config / was announced
        self._phase = "running"
        self._next: Optional[dict] = None  # while switching: the config of the next generation
        self._ready: set = set()  # the processes that prepared for it
        self._acks: Dict[str, dict] = {}  # client -> what it handed over (for the generation announced)
        self._announced_at = 0.0  # (monotonic) when the switch under way was announced
        self._handing = False  # a handover is under way (one at a time: see complete)
        self._reports: Dict[str, dict] = {}
        self._info: dict = {}  # what the starting process tells operators (why this plan, switches, estimates)
        self._requests: Dict[str, List[tuple]] = {}  # client -> (request id, task id) to explain
        self._answers: Dict[str, dict] = {}
        self._abandoned: set = set()  # requests of a survey that stopped waiting (see survey)
        self._cond = threading.Condition()
        self.calls = 0
        self.incarnation = uuid.uuid4().hex
        # restarted since the generation in force was published (a publish clears it): see restarted()
        self._restarted = _reconstructed()

    @staticmethod
    def durable_key(config: dict) -> str:
        return f"{config['plan'].policy.name}/{config['t0']}"

    def _registry_key(self) -> str:
        return f"{self.durable_key(self._config)}/clients"

    def _registry(self) -> None:
        """Keep the registered processes in the GCS (holds the lock). A restarted store knows none of them
        until each registers again, and a process that died first never does: its job's end or its
        worker's death went unseen by the owner's job watch, which reads the processes here, so it was
        never evicted, and its tasks' share of State (their OnDispatch) stayed for good (issue 35: a
        submitter killed while the store restarted)."""
        gcs_kv.put(self._registry_key(), {c: (*self._jobs.get(c, ("", 0.0)), self._workers.get(c, ""))
                                          for c in (*self._clients, *self._former)})

    def config(self) -> dict:
        return self._config

    def ping(self) -> None:
        """Nothing: a caller times the round trip (the monitor's message latency)."""

    # -- processes ------------------------------------------------------------
    def join(self, client: str, timeout_s: float = 30.0, job: str = "", worker: str = "") -> dict:
        """Register a submitting process (of Ray job ``job``; ``worker``: its Ray worker id, whose death the
        owner's job watch sees while the job lives on); return the config in force (after a switch in
        progress ends)."""
        with self._cond:
            self._cond.wait_for(lambda: self._phase == "running", timeout=timeout_s)
            known = client in self._clients or self._former.pop(client, None) is not None
            self._clients[client] = time.monotonic()
            self._jobs.setdefault(client, (job, time.time()))
            if worker:
                self._workers[client] = worker
            if not known:
                self._registry()
            return self._config

    def bound_for(self, job: str) -> Dict[str, Any]:
        """The values the operator bound Task fields to for ``job`` (see :mod:`ray_adaptive.runtime.tenancy`)."""
        return tenancy.bound_values(self._bind, job)

    def clients(self) -> Dict[str, str]:
        """Registered process -> its Ray job (what the runtime's owner watches for jobs that end); with those
        registered before this store restarted that have not registered again."""
        with self._cond:
            return {c: self._jobs.get(c, ("", 0.0))[0] for c in (*self._clients, *self._former)}

    def workers(self) -> Dict[str, str]:
        """Registered process -> its Ray worker id, for those that gave one (what the owner watches for
        processes that die while their job lives)."""
        with self._cond:
            return {c: w for c, w in self._workers.items() if c in self._clients or c in self._former}

    def leave(self, member: str) -> None:
        with self._cond:
            self._outstanding.pop(member, None)
            known = self._clients.pop(member, None) is not None or self._former.pop(member, None) is not None
            self._jobs.pop(member, None)
            self._workers.pop(member, None)
            self._reports.pop(member, None)
            self._acks.pop(member, None)
            self._requests.pop(member, None)
            if known:
                self._registry()
            self._cond.notify_all()

    def watch(self, generation: int, phase: str, incarnation: Optional[str], timeout_s: float = 2.0,
              client: str = "") -> tuple:
        """``(generation, phase, incarnation, requests, news)``, as soon as any of the first three
        differs from the caller's or an operator asks ``client`` to explain a task (``requests``:
        ``(request id, task id)`` pairs, see :meth:`ask`), or after ``timeout_s``. ``news``, what a
        switch's process needs, in this one reply (a switch's pause counts every round trip a process
        makes after it stops deciding): for a caller behind the generation in force, ``{"config",
        "seen"}`` (a sync's answer); while preparing, ``{"next"}``: the next generation's config."""
        with self._cond:
            self._cond.wait_for(lambda: (self._config["generation"], self._phase, self.incarnation)
                                != (generation, phase, incarnation) or self._requests.get(client), timeout=timeout_s)
            g = self._config["generation"]
            news: Optional[Dict[str, Any]] = None
            if g > generation:
                news = {"config": self._config, "seen": self._answer(client)}
            elif self._phase == "preparing":
                news = {"next": self._next}
            return g, self._phase, self.incarnation, self._requests.pop(client, []), news

    # -- operators --------------------------------------------------------------
    def ask(self, task_id: str, timeout_s: float = 10.0) -> dict:
        """Why is ``task_id`` pending, or why did it land where it did: asked of the process that
        submitted it (its id is the task id's prefix), which answers through :meth:`answer`."""
        client = task_id.rsplit("-", 1)[0]
        with self._cond:
            if client not in self._clients:
                return {"state": "unknown", "why": f"no process {client!r} submits to this runtime (task ids are "
                                                   f"<process>-<number>; its process may have left)"}
            rid = uuid.uuid4().hex
            self._requests.setdefault(client, []).append((rid, task_id))
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: rid in self._answers, timeout=timeout_s):
                return {"state": "unknown", "why": f"process {client!r} did not answer in {timeout_s:g} s"}
            return self._answers.pop(rid)

    def answer(self, request_id: str, result: dict) -> None:
        with self._cond:
            if request_id in self._abandoned:  # (its asker gave up waiting: nobody reads it)
                self._abandoned.discard(request_id)
                return
            self._answers[request_id] = result
            self._cond.notify_all()

    def survey(self, request: str, timeout_s: float = 5.0) -> Dict[str, Optional[dict]]:
        """Ask every registered process ``request`` at once (through :meth:`ask`'s channel; the State
        audit's, see :mod:`ray_adaptive.runtime.audit`): client -> its answer, None if it did not
        answer within ``timeout_s`` (a process that leaves meanwhile is left out)."""
        with self._cond:
            asked = {c: uuid.uuid4().hex for c in self._clients}
            for c, rid in asked.items():
                self._requests.setdefault(c, []).append((rid, request))
            self._cond.notify_all()
            self._cond.wait_for(lambda: all(rid in self._answers or c not in self._clients
                                            for c, rid in asked.items()), timeout=timeout_s)
            out: Dict[str, Optional[dict]] = {}
            for c, rid in asked.items():
                if rid in self._answers:
                    out[c] = self._answers.pop(rid)
                elif c in self._clients:
                    out[c] = None
                    self._abandoned.add(rid)
            return out

    def set_info(self, info: dict) -> None:
        """What the starting process tells operators: why this plan, the switches, estimates."""
        with self._cond:
            self._info.update(info)

    def info(self) -> dict:
        """What the owner told operators (:meth:`set_info`)."""
        with self._cond:
            return dict(self._info)

    def describe(self) -> dict:
        """Everything ``ray-adaptive status`` shows of this runtime (see :mod:`ray_adaptive.status`)."""
        cfg = self._config
        plan = cfg["plan"]
        with self._cond:
            now = time.monotonic()
            return {"policy": plan.policy.name, "plan": plan.name, "architecture": plan.architecture.value,
                    "generation": cfg["generation"], "phase": self._phase, "t0": cfg["t0"],
                    "limit": plan.policy.limit, "group_by": self._info.get("group_by"),
                    "nodes": [{**n.as_dict(), "slot": cfg["slots"].get(n.id)} for n in cfg["nodes"]],
                    "actors": {"store": ray.get_runtime_context().get_node_id(), "selector": cfg.get("selector"),
                               "placements": list(cfg.get("placements", []))},
                    "clients": {c: round(now - seen, 1) for c, seen in self._clients.items()},
                    "jobs": {c: {"job": job, "attached": at} for c, (job, at) in self._jobs.items()},
                    "bind": dict(self._bind),
                    "reports": {c: dict(r) for c, r in self._reports.items()}, "info": dict(self._info)}

    # -- switches -------------------------------------------------------------
    def config_of(self, generation: int) -> Optional[dict]:
        """The config of ``generation`` if it is in force or being switched to (None otherwise): what a
        restarted spare actor takes up (see :mod:`ray_adaptive.runtime.spare`)."""
        with self._cond:
            for cfg in (self._config, self._next):
                if cfg is not None and cfg["generation"] == generation:
                    return {k: v for k, v in cfg.items() if k != "handles"}
            return None

    def _check_next(self, generation: int) -> None:
        if generation != self._config["generation"] + 1:
            raise ValueError(f"generation {self._config['generation']} is in force: the next is "
                             f"{self._config['generation'] + 1}, not {generation}")

    def prepare(self, generation: int, config: dict) -> List[str]:
        """Show every registered process ``generation``'s config, to make its side of it while it still
        decides (see :mod:`ray_adaptive.runtime.switch`); return them."""
        with self._cond:
            self._check_next(generation)
            self._phase, self._next, self._ready = "preparing", config, set()
            self._cond.notify_all()
            return sorted(self._clients)

    def prepared(self, client: str, generation: int) -> None:
        """A process has made its side of ``generation``."""
        with self._cond:
            if self._phase == "preparing" and generation == self._config["generation"] + 1:
                self._ready.add(client)
                self._cond.notify_all()

    def wait_prepared(self, generation: int, clients: List[str], timeout_s: float) -> List[str]:
        """Wait until every one of ``clients`` still registered has prepared; return those that did not."""
        with self._cond:
            self._cond.wait_for(lambda: not self._missing(clients, self._ready), timeout=timeout_s)
            return self._missing(clients, self._ready)

    def announce(self, generation: int, wait_s: float = 0.0, handover: Optional[Handover] = None
                 ) -> Tuple[List[str], str, List[str], Optional[dict]]:
        """Ask every registered process to freeze for ``generation``; return them, this store's
        incarnation, those of them that did not ack within ``wait_s`` and, if every one did and a
        ``handover`` is given, what :meth:`complete` did (idempotent; the wait is :meth:`wait_acks`'s, in
        the same call: a switch's pause counts every round trip). Those registered with an incarnation
        that died and not heard from since are among them: each registers again at its next watch and
        acks; one the switch did not wait for would decide on under the plan it had, and take up a later
        generation with its running tasks counted in a State that never held their OnDispatch.

        ``generation`` already in force (this store restarted after publishing it, before its answer
        reached the switch): nothing is announced, and the answer says what was published."""
        with self._cond:
            if handover is not None and generation == self._config["generation"]:
                return [], self.incarnation, [], self._published()
            self._check_next(generation)
            if self._phase != "freezing":
                self._phase, self._acks, self._announced_at = "freezing", {}, time.monotonic()
            self._cond.notify_all()
            clients = sorted({*self._clients, *self._former})
            self._cond.wait_for(lambda: not self._missing(clients, self._acks), timeout=wait_s)
            missing = self._missing(clients, self._acks)
        done = self.complete(generation, self.incarnation, handover) if handover is not None and not missing else None
        return clients, self.incarnation, missing, self._with_acks(done)

    def ack(self, client: str, generation: int, handed: dict) -> bool:
        """A process has frozen for ``generation`` (``handed``: counts of what it holds and, from a
        replica, ``pushes``: its last State changes, see :meth:`StoreClient.hand_off` -- merged here, so
        that a replica's freeze costs no round trip of its own). False: no such switch."""
        with self._cond:
            if self._phase != "freezing" or generation != self._config["generation"] + 1:
                return False
            pushes = handed.get("pushes")
            if pushes is not None:
                member, replica_generation, numbered = pushes
                if replica_generation == self._config["generation"]:  # (as sync: a replaced plan's, nothing)
                    self._merge_pushes(member, numbered)
            self._acks[client] = {k: v for k, v in handed.items() if k != "pushes"}
            self._cond.notify_all()
            return True

    def wait_acks(self, generation: int, clients: List[str], timeout_s: float, handover: Optional[Handover] = None
                  ) -> Tuple[List[str], str, Optional[dict]]:
        """Wait until every one of ``clients`` still registered has acked; return those that did not, this
        store's incarnation (a restarted one knows of no ack) and, if none is missing and a ``handover``
        is given, what :meth:`complete` did."""
        with self._cond:
            self._cond.wait_for(lambda: not self._missing(clients, self._acks), timeout=timeout_s)
            missing, incarnation = self._missing(clients, self._acks), self.incarnation
        done = self.complete(generation, incarnation, handover) if handover is not None and not missing else None
        return missing, incarnation, self._with_acks(done)

    def _with_acks(self, done: Optional[dict]) -> Optional[dict]:
        """``done`` with ``acks_s``: announce to the handover's start, when this call made it."""
        return {**done, "acks_s": done["began"] - self._announced_at} if done and "began" in done else done

    def _published(self) -> dict:
        """What a switch learns of a generation published before (holds the lock)."""
        return {"exact": not self._config.get("rebuild", False), "again": True}

    def complete(self, generation: int, incarnation: str, h: Handover) -> dict:
        """Collect the State from the plan in force, install it in the next generation's selector and
        publish the next generation (``h.config``): a switch's steps 3 and 4, made here, so that no step
        waits for a round trip through the switching process. :meth:`announce` and :meth:`wait_acks` call it
        once every process acked; the switch calls it when it stopped waiting for the others, or paused
        after the acks (see :func:`~ray_adaptive.runtime.switch.switch`). ``incarnation``: the store's that
        the acks were made to; another one (this store restarted since) lost the replicas' last pushes, so
        the State is rebuilt. The lock is not held while the selector and placements are called (a hybrid's
        placements sync with this store as they freeze). Returns ``exact``, when it began (this store's monotonic clock) and the seconds each
        step took; or, ``generation`` published already (by a call whose answer was lost), what was."""
        with self._cond:
            # (a call made again -- Ray said this actor was unavailable, yet it lived on -- waits for the first)
            self._cond.wait_for(lambda: not self._handing)
            if generation == self._config["generation"]:
                return self._published()
            self._check_next(generation)
            self._handing, config = True, h.config
        try:
            began = time.monotonic()
            state, exact = (None, False) if h.rebuild else freeze_authority(h)
            with self._cond:
                merged, now, restarted = copy_state(self._state), self.incarnation, self._restarted
            if restarted or now != incarnation:
                # restarted since the plan in force began (or during this switch): a process that had not
                # registered again when the switch was announced was not waited for -- its replica's last
                # changes never reach this store, its finish notifications may reach the frozen selector
                # after its State was taken -- so the State is rebuilt from every process's tasks instead
                # (each process, late or not, rebuilds its share when it takes up the new generation)
                exact = False
            handed = assemble(h, state, merged) if exact else None
            collected = time.monotonic()
            selector = config.get("handles")
            install = (lambda: selector.install.remote(handed)) if selector is not None else None
            installing = install() if install is not None else None
            # (the next selector gets its State while this publishes: a process that resumes first waits in its
            # first exchange until the State is in -- the selector answers none before)
            self.publish({**config, "rebuild": not exact}, {**h.base, **(handed or {})}, h.merge)
            published = time.monotonic()
            install_s: Optional[float] = None
            if install is not None:
                try:
                    get_or_again(installing, install, h.timeout_s)
                    install_s = time.monotonic() - collected
                except Exception:  # (it died: a restarted selector rebuilds its State from the processes' tasks)
                    warnings.warn(f"ray-adaptive: the selector of generation {generation} did not take its State")
            return {"exact": exact, "began": began, "collect_s": collected - began, "publish_s": published - collected,
                    "install_s": install_s}
        finally:
            with self._cond:
                self._handing = False
                self._cond.notify_all()

    def _missing(self, clients: List[str], have) -> List[str]:
        """Of ``clients``, those still registered (with this incarnation or one that died) and not in
        ``have`` (holds the lock)."""
        return [c for c in clients if (c in self._clients or c in self._former) and c not in have]

    def state(self) -> dict:
        """The merged State of the replicas (what a switch hands over from a decentralized plan)."""
        with self._cond:
            return copy_state(self._state)

    def publish(self, config: dict, state: dict, merge: Optional[Mapping[str, str]]) -> None:
        """Put ``config``'s generation in force with ``state`` as its base State; every process resumes."""
        with self._cond:
            if config["generation"] != self._config["generation"] + 1:
                raise ValueError(f"cannot publish generation {config['generation']} over {self._config['generation']}")
            durable = {k: v for k, v in config.items() if k != "handles"}  # (a restarted store: names)
            gcs_kv.put(self.durable_key(config), (durable, state, dict(merge or {})))
            self._config, self._base, self._state = config, copy_state(state), copy_state(state)
            self._merge = dict(merge or {})
            # each process's tasks on nodes, as it acked them: the next plan's replicas see the others'
            # loads from their first decision, not from the others' first sync
            self._outstanding = {c: dict(a.get("outstanding", {})) for c, a in self._acks.items()}
            self._phase, self._acks, self._next = "running", {}, None
            self._restarted = False
            self._cond.notify_all()

    def restarted(self) -> bool:
        """Whether this store was restarted since the generation in force was published. Its merged State
        is then whole only once every replica has synced again -- and a process that had not registered
        again when a switch was announced was not waited for: its replica's changes may never come (see
        :func:`ray_adaptive.runtime.switch.switch`, which rebuilds the State then)."""
        with self._cond:
            return self._restarted

    def forget_durable(self) -> None:
        """The runtime shuts down: nothing of it should come back."""
        gcs_kv.delete(self.durable_key(self._config))
        gcs_kv.delete(self._registry_key())

    # -- replicas -------------------------------------------------------------
    def sync(self, member: str, delta: Mapping[str, Any], outstanding: Mapping[str, int],
             generation: int = 0, pushes: Optional[Tuple[str, Sequence[Tuple[int, Mapping[str, Any]]]]] = None
             ) -> SyncAnswer:
        """Merge ``delta``, record ``outstanding``; answer the merged State. ``pushes``: ``(sender, [(number,
        delta), ...])``, a :class:`StoreClient`'s numbered deltas not yet answered: each is merged once by
        this incarnation, whichever of the sender's calls carries it (a call whose answer was lost is
        carried again by the next)."""
        with self._cond:
            self.calls += 1
            if generation == self._config["generation"]:  # (a late push of a replaced plan's replica: nothing)
                if delta:
                    merge_into(self._state, delta, self._merge)
                if pushes is not None:
                    self._merge_pushes(member, pushes)
                self._outstanding[member] = dict(outstanding)
            return self._answer(member)

    def _merge_pushes(self, member: str, pushes: Tuple[str, Sequence[Tuple[int, Mapping[str, Any]]]]) -> None:
        """Merge each of ``pushes``' numbered deltas this incarnation did not merge yet (holds the lock)."""
        sender, numbered = pushes
        last = self._merged.get(member, ("", 0))
        done = last[1] if last[0] == sender else 0
        for n, d in numbered:
            if n > done:
                merge_into(self._state, d, self._merge)
                done = n
        self._merged[member] = (sender, done)

    def _answer(self, member: Optional[str]) -> SyncAnswer:
        """What a sync of ``member`` is answered (holds the lock)."""
        return SyncAnswer({v: self._state[v] for v in self._merge}, self._loads(but=member), self.incarnation,
                          self._config["generation"])

    def _loads(self, but: Optional[str] = None) -> Dict[str, int]:
        """Outstanding tasks per node, over every member but ``but``."""
        loads: Dict[str, int] = {}
        for m, per_node in self._outstanding.items():
            if m != but:
                for node, k in per_node.items():
                    loads[node] = loads.get(node, 0) + k
        return loads

    # -- load reports ---------------------------------------------------------
    def report(self, client: str, load: dict) -> None:
        """A process's recent load (see :meth:`ray_adaptive.monitor.Monitor.load`)."""
        with self._cond:
            self._reports[client] = dict(load)
            if client in self._clients:
                self._clients[client] = time.monotonic()

    def quiet_for(self, clients: List[str]) -> Dict[str, float]:
        """Seconds since each of ``clients`` still registered was last heard from (a load report, a join):
        how the owner learns that a process a switch took for dead lives on. One registered with an
        incarnation that died counts as silent since this one started (it registers again when it is back)."""
        with self._cond:
            now = time.monotonic()
            heard = {**self._former, **self._clients}
            return {c: now - heard[c] for c in clients if c in heard}

    def loads(self) -> Dict[str, dict]:
        with self._cond:
            return {c: dict(r) for c, r in self._reports.items()}

    def stats(self) -> dict:
        """Sync calls, members, and the outstanding tasks per node the members last reported."""
        with self._cond:
            return {"calls": self.calls, "members": len(self._outstanding), "outstanding": self._loads(),
                    "clients": len(self._clients), "generation": self._config["generation"], "phase": self._phase}


def _reconstructed() -> bool:
    """Whether this actor is a restart of one that died (False outside an actor: a store made in process)."""
    context = ray.get_runtime_context()
    if context.get_actor_id() is None:
        return False
    with warnings.catch_warnings():  # (Ray reads the actor table through a deprecated API)
        warnings.simplefilter("ignore")
        return context.was_current_actor_reconstructed


class StoreClient:
    """A scheduler that syncs with the store: State deltas and heartbeats of loads.

    Syncing never blocks a decision: :meth:`refresh` pushes this replica's
    changes and loads in a call it does not wait for, and applies the
    store's answer on a later refresh, once it has come. What this replica
    changed meanwhile rides on top of the merged State it gets back.

    A sync that brought no news -- the others' loads came back as the last
    time, and the merged State as the last time plus this replica's own push
    -- doubles the period, up to ``QUIET_S``; any news restores the plan's
    period. A process submitting alone thus syncs ten times a second, not a
    hundred: the store actor's CPU per sync comes out of the workers on a
    saturated machine. A
    process that starts submitting is news to the others at its first sync;
    until their next one (within ``QUIET_S``), it sees their State and loads
    as they last pushed them.

    Pushes are numbered, and a delta counts as merged only once an answer
    says so: until then every call carries it again (with its number; a
    store merges each number of a client once), so a call that fails -- the
    store died before merging it, or after, with the answer lost (Ray cannot
    tell which) -- loses nothing and doubles nothing. A member keeps the sum
    of the deltas answered (``_held``: what the store holds of it). When the
    incarnation changes -- the store died and was restarted from the
    generation's base State -- the new one holds exactly the deltas of the
    call it answered (it merged no earlier one of this member: those were
    answered by the old one), so the member keeps its own view instead of
    the answer and pushes ``_held`` again, at once, as a delta of its own:
    the merged State is back once every member has synced. A process that
    leaves or freezes (:meth:`flush`) pushes until the store has all of it.
    """

    QUIET_S = 0.1  # the longest period between syncs while they bring no news
    RETRY_S = 0.05  # after a call that failed (the store restarts), the next push waits this long
    FLUSH_S = 10.0  # the longest a flush pushes again (a restarting store), then gives up

    def __init__(self, member: str, spec: RoleSpec, sched: Scheduler, store, floor_s: float = 0.0,
                 generation: int = 0):
        self.member, self.spec, self.sched, self.store = member, spec, sched, store
        self._merge: Mapping[str, str] = spec.merge or {}  # (a replica's spec has its merge rules)
        self.generation = generation  # of the plan this replica belongs to
        self.floor_s = floor_s  # the shortest period between syncs, whatever the plan says
        self._next = 0.0
        self._inflight: Optional[Future] = None  # the store's answer to the last push
        self._sent: dict = {}  # the State changes of this replica the last push carried
        self._seen: Optional[tuple] = None  # (merged State, others' loads) of the last answer
        self._id = uuid.uuid4().hex  # numbers this client's deltas at the store (see StateStore.sync)
        self._number = 0  # of the last delta pushed
        self._unanswered: List[Tuple[int, dict]] = []  # deltas pushed that no answer counted yet
        self._held: dict = {}  # every delta the store of _incarnation answered, merged
        self._incarnation: Optional[str] = None  # the store's, at the last answer
        self._failed: Optional[BaseException] = None  # what the last call raised, if it did
        self.pushes = 0
        self.sync_s: deque = deque(maxlen=10_000)  # round trips of the recent syncs (seconds)
        # one call carries both the others' loads (every heartbeat_s) and State (every sync_s, if
        # replicated): the shorter period; 0 is before every decision batch (exact loads, or a
        # State synced per decision)
        periods = [spec.heartbeat_s] + ([spec.sync_s] if spec.merge else [])
        self._base = max(min(periods), floor_s)
        self._period = self._base

    def due(self) -> bool:
        return self.store is not None and self._inflight is None and time.monotonic() >= self._next

    @property
    def owes(self) -> bool:
        """Deltas no answer counted (a call failed; a restarted store lacks this replica's pushes): the
        next refresh pushes, wanted or not."""
        return bool(self._unanswered)

    def refresh(self, want: bool = True, wait: bool = False) -> None:
        """Apply the store's answer if it has come; start the next sync if ``want`` and one is due;
        with ``wait``, wait for that answer too (a placement actor, off the launch path, decides on
        fresh loads)."""
        if self._inflight is not None:
            if not self._inflight.done():
                return
            self._apply()
        if (want or self.owes) and self.due():
            self._number_changes()
            self._sent = {}
            for _, d in self._unanswered:
                merge_into(self._sent, d, self._merge)
            sent = time.perf_counter()
            inflight: Future = self.store.sync.remote(self.member, {}, self.sched.outstanding(), self.generation,
                                                      (self._id, list(self._unanswered))).future()
            # timed when the answer lands (on Ray's thread), not when a later refresh applies it
            inflight.add_done_callback(lambda _f: self.sync_s.append(time.perf_counter() - sent))
            self._inflight = inflight
            self._next = time.monotonic() + self._period
            self.pushes += 1
            if wait:
                self._apply()

    def _number_changes(self) -> None:
        """This replica's State changes since the last call, as the next numbered delta unanswered."""
        log = self.sched.log
        delta = log.take() if log is not None else {}
        if delta:
            self._number += 1
            self._unanswered.append((self._number, delta))

    def _apply(self) -> None:
        answer, self._inflight = self._inflight, None
        if answer is None:
            return
        try:
            reply: SyncAnswer = answer.result()
        except Exception as err:  # the store died (it restarts: a later answer says so) or is shut down
            # (merged or not, the deltas are still unanswered: the next push carries them again)
            self._failed, self._next = err, max(self._next, time.monotonic() + self.RETRY_S)
            return
        self._failed = None
        if reply.generation != self.generation:  # a switch replaced this replica's plan: nothing here is ours
            self._unanswered = []
            return
        state, others, incarnation = reply.state, reply.others, reply.incarnation
        restarted = self._incarnation not in (None, incarnation)
        self._incarnation = incarnation
        answered, self._unanswered = self._unanswered, []
        if restarted:  # it holds the deltas of this call only: keep our view, push what the dead one held
            lost, self._held = self._held, {}
            if lost:
                self._number += 1
                self._unanswered.append((self._number, lost))
            for _, d in answered:
                merge_into(self._held, d, self._merge)
            self._next, self._seen = 0.0, None
            self.sched.set_others(others)
            return
        for _, d in answered:
            merge_into(self._held, d, self._merge)
        if self._seen is None or others != self._seen[1]:
            news = True
        else:  # the others pushed no State change: the store merged this replica's push only
            expected = copy_state(self._seen[0])
            merge_into(expected, self._sent, self._merge)
            news = not same_state(state, expected)
        if news:
            self._period = self._base
        elif self._base > 0:  # (a member syncing before every batch keeps doing so: the plan's choice)
            self._period = min(2 * self._period, max(self.QUIET_S, self._base))
        self._seen = (state, others)
        self._take(state, others)

    def _take(self, state: dict, others: Dict[str, int]) -> None:
        """The store's merged State and the others' loads, under this replica's changes since its push."""
        log = self.sched.log
        if log is not None:
            merged = copy_state(state)
            merge_into(merged, log.peek(), self._merge)  # this replica's changes since the push
            self.sched.interp.state.update(merged)
            log.rebase(state)  # (those changes are still to push)
        self.sched.set_others(others)

    def report(self) -> None:
        """After dispatching or finishing: tell the store this scheduler's loads at once (fire and
        forget). Without it a scheduler with nothing pending never syncs, and the others would
        wait forever for room its finished tasks freed."""
        if self.store is not None:
            self.store.sync.remote(self.member, {}, self.sched.outstanding(), self.generation)

    def start_from(self, answer: SyncAnswer) -> None:
        """Take ``answer`` as this replica's first sync (the store's State and loads as of a switch's
        publish, come with the news of it): the first decisions need no round trip to the store."""
        self._incarnation, self._seen = answer.incarnation, (answer.state, answer.others)
        self._take(answer.state, answer.others)

    def hand_off(self) -> Tuple[str, int, Tuple[str, List[Tuple[int, dict]]]]:
        """A live switch freezes this replica: it syncs no more, and returns what the store lacks of it
        -- its member name, generation and numbered deltas not yet answered, this replica's last changes
        among them -- for the switch's ack to carry (see :meth:`StateStore.ack`; each number is merged
        once, whether a sync still in flight or the ack brings it first). No round trip: :meth:`flush`
        waits for two. A store restarted since this generation began lacks earlier deltas too, and the
        ack does not bring them: such a store hands the State over rebuilt, never merged (see
        :meth:`StateStore.complete`)."""
        self._number_changes()
        self.store = None
        return self.member, self.generation, (self._id, list(self._unanswered))

    def flush(self) -> None:
        """Push every change of this replica now and wait until the store has merged it (a live switch
        takes the merged State next); then this client syncs no more. A store that restarted is pushed
        what it lacks of this replica too; one that does not answer is pushed again for ``FLUSH_S`` at
        most (twice in a row dead: gone for good, the runtime shut down)."""
        if self.store is None:  # (flushed, or handed off to a switch's ack: this replica syncs no more)
            return
        if self._inflight is not None:
            try:
                self._inflight.result()
            except Exception:
                pass  # (_apply sees it: a store that died answers nothing)
            self._apply()
        deadline, died = time.monotonic() + self.FLUSH_S, 0
        while True:
            self._next = 0.0
            self.refresh(want=True, wait=True)
            died = died + 1 if isinstance(self._failed, ray.exceptions.ActorDiedError) else 0
            if not self._unanswered or died >= 2 or time.monotonic() > deadline:
                break
            if self._failed is not None:
                time.sleep(self.RETRY_S)
        self.store = None


def ping(actor, record: Callable[[float], None]) -> None:
    """Call ``actor.ping`` and, when it answers, ``record`` the round trip (seconds). Never waits:
    an actor slow to answer delays nothing but its own figure."""
    start = time.perf_counter()

    def answered(future) -> None:
        if future.exception() is None:
            record(time.perf_counter() - start)

    actor.ping.remote().future().add_done_callback(answered)
