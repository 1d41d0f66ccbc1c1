"""The selector actor: one global pending queue, exact State, decisions for every submitting process.

A centralized plan's one scheduler, and a hybrid's task chooser, run in a
:class:`Selector` actor; each submitting process talks to it through a
:class:`~ray_adaptive.runtime.selector_client.SelectorClient`.

* **Exchange.** ``exchange(client, tasks)`` adds a client's new tasks and
  returns the decisions made for that client's tasks, waiting up to
  ``wait_s`` for one while it has tasks pending here: a long poll, so an idle
  client costs nothing and a busy one gets its decisions as soon as they are
  made. With placement schedulers (the hybrid), a decision picks the task,
  and a :class:`~ray_adaptive.runtime.placement.Forwarder` sends the tasks on
  and relays their node choices. ``finished(ids)`` takes finish
  notifications, as a call of their own, so that the room they free reaches
  a long poll in flight.
* **Leases** to a lone client: see :mod:`ray_adaptive.runtime.lease`.
* **Restarts.** The selector is restarted when its process dies (the
  topology starts it with ``max_restarts=-1``), with a new ``incarnation``
  and nothing of the old one's queue, running tasks or State. Every answer
  carries the incarnation: a client that sees it change sends its undecided
  tasks again and, as a handback with ``rebuild``, the tasks it launched
  that run still, whose OnDispatch rebuilds State here. A client with tasks
  running and nothing to submit asks every ``IDLE_CHECK_S`` (an empty
  exchange, answered at once), so it hands them back within
  ``LeaseDesk.QUIET_S`` of the restart, before any lease. One that comes
  later, with a lease out, is adopted when the lease comes back, after the
  holder's State. A process holding a lease of the incarnation that died
  hands it back as such a rebuild: its State is not the restarted one's to
  replace. A task already pending or running here is not added twice. A
  hybrid's restarted selector first empties its placement schedulers, which
  held tasks for the old one.
* **Live switches.** A selector of a plan switched to starts without a
  State (``awaiting_state``) and answers no exchange until the switch
  :meth:`~Selector.install` puts in the one handed over; one switched away
  from is stopped by :meth:`~Selector.freeze` once every process has stopped
  talking to it, and yields its exact State (see :mod:`ray_adaptive.runtime.switch`).
"""

from __future__ import annotations

import threading
import time
import uuid
import warnings
from typing import Dict, List, Optional, Sequence, Tuple

import ray

from ray_adaptive.plan import NodeState, RoleSpec, TaskState
from ray_adaptive.plan.explain import explain_pending, explain_placed
from ray_adaptive.plan.replicas import copy_state
from ray_adaptive.runtime.delivery import DeliveryClock
from ray_adaptive.runtime.lease import LeaseDesk
from ray_adaptive.runtime.messages import Decision, Decisions, Handback, Lease, Recall, Reply, Stop
from ray_adaptive.runtime.placement import Forwarder
from ray_adaptive.runtime.selector_preempt import SelectorPreemption

__all__ = ["Selector"]


class Selector:
    """The selector: the global pending queue, exact State, decisions for every submitting process (see
    the module doc for its protocol)."""

    # a policy with Preempt, centralized: its victims and their clock (made at the first decision: see
    # _preemption), and the thread that asks for the stops at the end of each grace
    _pre: Optional[SelectorPreemption] = None

    def __init__(self, spec: Optional[RoleSpec] = None, nodes: Sequence[NodeState] = (),
                 placements: Sequence[Tuple[str, str]] = (), t0: float = 0.0, wait_s: float = 0.05,
                 lease: bool = False, awaiting_state: bool = False, records: int = 0,
                 spare: Optional[Tuple[str, str, int]] = None, placement_finishes: bool = True):
        self._wait_s = wait_s
        self._cond = threading.Condition()
        self._installed = self._closed = self._frozen = False
        self._woken: set = set()  # clients whose long poll is to end now (see wake)
        self._spare = spare  # (store name, namespace, generation): started before its switch, configured by it
        with warnings.catch_warnings():  # (Ray reads the actor table through a deprecated API)
            warnings.simplefilter("ignore")
            self._restarted = ray.get_runtime_context().was_current_actor_reconstructed
        self._configured = False
        if spec is not None:
            self._setup(spec, nodes, placements, t0, lease, awaiting_state, records, placement_finishes)
        elif self._restarted:  # a spare its switch configured: its config is the store's (a restart's
            cfg = self._stored_config()  # arguments are the first ones, and a spare's have none)
            if cfg is not None:
                self._setup_from(cfg)

    def _setup(self, spec: RoleSpec, nodes: Sequence[NodeState], placements: Sequence[Tuple[str, str]], t0: float,
               lease: bool, awaiting_state: bool, records: int, placement_finishes: bool = True) -> None:
        """``placement_finishes``: the hybrid's placements run OnFinish on a State replica (their role
        spec's ``finishes``), so they hear each finish at once (see Forwarder)."""
        self._s = spec.scheduler(nodes, records=records)
        self._t0 = t0
        self._mail: Dict[str, List[Decision]] = {}
        self._delivery = DeliveryClock()  # how long each client's mail waits for it (see runtime.delivery)
        self._waiting: Dict[str, int] = {}  # client -> its tasks not decided yet
        self._gone: set = set()  # clients that left (see forget)
        self._dead: set = set()  # nodes marked dead
        self.decisions = 0
        self.incarnation = uuid.uuid4().hex
        restarted = self._restarted
        self._desk = LeaseDesk(lease, restarted)
        self._installed = restarted or not awaiting_state  # (restarted: the clients rebuild its State)
        self._fwd: Optional[Forwarder] = None  # the hybrid's placement schedulers
        if placements:
            # (named, not handles: arguments that hold actor handles go to the object store, and a
            # restart needs its arguments still there -- ray-project/ray#53727)
            handles = [h for h in (_lookup(name, namespace) for name, namespace in placements) if h is not None]
            self._fwd = Forwarder(handles, self._cond, self._now, self._release, self._mail_to, self._decide,
                                  finishes_at_once=placement_finishes)
            self._fwd.start(restarted)
        self._s.slack = self._slack
        self._configured = True

    def _slack(self, t: TaskState) -> float:
        """How long before its deadline ``t`` counts as past it: its process's delivery time (see
        runtime.delivery) -- and, for the hybrid, the forwarding hop's to a placement before it --, at
        most half its deadline's span: a process measured slow once (its first answer's wait took in
        its start-up) must not have its tasks dropped at once."""
        hop = self._fwd.slack() if self._fwd is not None else 0.0
        return min(self._delivery.slack(t.origin) + hop, 0.5 * (t.deadline - t.arrival))

    # ------------------------------------------------------------- a spare (see runtime.spare)
    def configure(self, config: dict) -> str:
        """Take up the generation ``config`` describes (a topology's config): a spare started before the
        switch that needs it. Returns this incarnation."""
        with self._cond:
            if not self._configured:
                self._setup_from(config)
            return self.incarnation

    def _setup_from(self, cfg: dict) -> None:
        from ray_adaptive.plan import Role, lease_spec, role_specs

        assert self._spare is not None
        specs = role_specs(cfg["plan"], cfg["overflow"])
        namespace = self._spare[1]
        placing = specs.get(Role.SCHEDULERS)
        self._setup(specs[Role.SELECTOR], cfg["nodes"], [(name, namespace) for name in cfg["placements"]], cfg["t0"],
                    lease_spec(cfg["plan"], cfg["overflow"], specs) is not None, cfg["generation"] > 0, cfg["records"],
                    placing is None or placing.finishes)

    def _stored_config(self, timeout_s: float = 0.0) -> Optional[dict]:
        """This spare's generation's config as the store has it once its switch prepared it (None: not
        yet, after ``timeout_s``)."""
        assert self._spare is not None
        store_name, namespace, generation = self._spare
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                cfg = ray.get(ray.get_actor(store_name, namespace=namespace).config_of.remote(generation), timeout=30)
            except (ValueError, ray.exceptions.RayActorError):  # (the store restarting: it comes back)
                cfg = None
            if cfg is not None or time.monotonic() >= deadline:
                return cfg
            time.sleep(0.1)

    def _ensure_configured(self) -> None:
        """A spare restarted before its switch configured it again: its config from the store, which has
        it since the switch prepared it (before anything reaches this selector but :meth:`configure`)."""
        if self._configured:
            return
        cfg = self._stored_config(timeout_s=60.0)
        if cfg is None:
            raise RuntimeError(f"the spare selector of generation {self._spare and self._spare[2]} was restarted "
                               f"and its switch's config is not at the store")
        with self._cond:
            if not self._configured:
                self._setup_from(cfg)

    def _now(self) -> float:
        return time.time() - self._t0

    def finished(self, ids: Sequence[str]) -> None:
        """Finish notifications: free the room, run OnFinish, decide what that allows."""
        with self._cond:
            now = self._now()
            self._release(ids, now)
            self._decide(now)
            self._cond.notify_all()

    def _release(self, ids: Sequence[str], now: float) -> None:
        pre = self._pre
        for tid in ids:
            self._desk.finished(tid)
            if pre is not None:
                pre.finished(tid)
            if self._s.finish(tid, now) is not None and self._fwd is not None:
                self._fwd.finished(tid)

    def forget(self, client: str) -> None:
        """A client leaves (its router closed): its tasks still pending here are dropped, and decisions
        it will never receive free their room as finishes would -- later ones too (the hybrid's
        placements may still answer for it). Without this, its tasks would be decided for a process
        that is gone and hold their nodes' room for good."""
        with self._cond:
            now = self._now()
            self._s.cancel_pending(lambda t: t.origin == client)
            undelivered = [tid for tid, _ in self._mail.pop(client, [])]
            self._delivery.forget(client)
            self._release(undelivered, now)
            self._gone.add(client)
            self._waiting.pop(client, None)
            self._desk.forget(client)
            self._decide(now)
            self._cond.notify_all()

    def _mail_to(self, client: str, tid: str, node: Optional[str], now: float) -> bool:
        """Send a decision (node None: dropped at its deadline) to its client; False if the client is
        gone (its room is freed instead)."""
        if client in self._gone:
            self._release([tid], now)
            return False
        self._mail.setdefault(client, []).append((tid, node))
        self._delivery.mailed(client)
        return True

    def exchange(self, client: str, tasks: Sequence[TaskState], handback: Optional[Handback] = None,
                 holding: bool = False) -> Reply:
        """A client's new tasks (and running ones it hands over, ``handback``): :class:`Decisions` for
        that client's tasks, a :class:`Lease` (its tasks back, undecided, with State), or, to the
        holder of the lease, a :class:`Recall`. ``holding``: the client holds this selector's lease."""
        with self._cond:
            if not self._installed:  # (a switch installs the State while it tells the processes to come)
                self._cond.wait_for(lambda: self._installed or self._closed, timeout=30.0)
            now = self._now()
            desk = self._desk
            desk.heard(client)
            if desk.holder == client and not holding and (handback is None or handback.state is None):
                # the holder calls without the lease: the answer that granted it never reached it (the call
                # raised in the client). Its State is still this one -- nobody decided under it -- so it
                # is taken back at once; else every call of a lone client was answered as the holder's
                # long poll, and its tasks waited for ever.
                self._end_lease()
            if handback is not None:
                self._take_back(client, handback)
                self._release(handback.finished, now)  # (as a finish right after it: see Handback)
            if desk.holder == client:  # the holder's long poll: answered at a recall
                deadline = time.monotonic() + self._wait_s
                while (desk.recalled_at is None and not self._closed and client not in self._woken
                       and time.monotonic() < deadline):
                    self._cond.wait(deadline - time.monotonic())
                # (woken, it stays so: the handback its process makes next is not kept waiting either)
                return Recall(desk.recalled_at is not None, self.incarnation)
            if desk.holder is not None:  # another client wants decisions: the lease comes back first
                if desk.recall():
                    self._cond.notify_all()
                elif desk.holder_silent():
                    self._end_lease()
            elif handback is None and self._may_lease(client):  # (one giving a lease back is leaving or recalled)
                return self._grant(client, tasks)
            remailed = self._remail(client, tasks)
            tasks = [t for t in tasks if not self._s.knows(t.id)]  # (sent again after a restart)
            # (a restarted selector had no OnArrival of any: see _take_back)
            arrived = set(handback.arrived) if handback is not None and not self._restarted else ()
            for t in tasks:
                t.origin = client
                self._s.add(t, now, arrived=t.id in arrived)
            self._waiting[client] = self._waiting.get(client, 0) + len(tasks) + remailed
            pre = self._preemption()
            if pre is not None and tasks:
                pre.arrived()
            self._decide(now)
            # (a handback is answered at once: the finishes its process holds until it lands may be the room
            # its tasks wait for -- a long poll here would wait out ``wait_s`` for them)
            deadline = time.monotonic() + (self._wait_s if handback is None else 0.0)
            while (not self._mail.get(client) and self._waiting.get(client) and not self._closed
                   and client not in self._woken and not (pre is not None and pre.mail.get(client))):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            self._woken.discard(client)
            out = self._mail.pop(client, [])
            if out:
                self._delivery.taken(client)
            self._waiting[client] -= len(out)
            return Decisions(out, self.incarnation, pre.take_stops(client) if pre is not None else [])

    def _remail(self, client: str, tasks: Sequence[TaskState]) -> int:
        """Of ``tasks``, sent as undecided by ``client``, mail again the decisions of those running here for
        it: the answer that carried them was lost (the call raised in the client while this incarnation
        lived on), and the client sends its undecided tasks again -- without this, they waited for ever.
        It launches a task once whatever it is told (see SelectorClient). Not under the hybrid, whose
        placement actors answer for their tasks. Returns how many."""
        if self._fwd is not None or not tasks:
            return 0
        mailed = {tid for tid, _ in self._mail.get(client, ())}
        again = [(t.id, running.node) for t in tasks
                 if (running := self._s.running.get(t.id)) is not None and running.origin == client
                 and t.id not in mailed]
        if again:
            self._mail.setdefault(client, []).extend(again)
            self._delivery.mailed(client)
        return len(again)

    # ---------------------------------------------------------------- leases (see runtime.lease)
    def _may_lease(self, client: str) -> bool:
        idle = not (self._closed or self._s.pending or self._s.running)
        return idle and self._desk.may_grant(client)

    def _grant(self, client: str, tasks: Sequence[TaskState]) -> Lease:
        self._desk.grant(client)
        return Lease(copy_state(self._s.interp.state), [n.id for n in self._s.nodes if not n.alive], list(tasks),
                     self.incarnation)

    def _end_lease(self) -> None:
        """The lease is back (or taken back): the tasks rebuilt meanwhile join the State now in force."""
        for client, running in self._desk.end().items():
            self._adopt(client, list(running.values()), dispatch_hooks=True)

    def _take_back(self, client: str, handback: Handback) -> None:
        """Running tasks decided elsewhere, whose finishes come here from now on: a lease coming
        back, with the holder's State (unless it was taken already: a late holder's State is
        stale by now) -- or, after a restart (``rebuild``), a client's tasks decided by the old
        incarnation, whose OnDispatch rebuilds their share of State. A rebuild that comes while
        a lease is out waits for it to end: the State the holder hands back replaces this one,
        and would drop their share. A lease whose State is not applied -- taken back from a
        silent holder, or granted by an incarnation that died -- comes back as a rebuild too; and
        so does a live switch's handover that reaches a restarted selector: the State the switch
        installed, which held those tasks' OnDispatch, died with the incarnation it was installed
        in (a restarted selector's State is only ever rebuilt from the tasks)."""
        rebuild = handback.rebuild or (self._restarted and handback.state is None)
        lease_back = handback.state is not None and self._desk.holder == client
        if lease_back and handback.state is not None and handback.granted_by in (None, self.incarnation):
            self._s.interp.state.update(handback.state)
        elif handback.state is not None:
            rebuild = True
        if lease_back:
            self._end_lease()
        for node_id in handback.dead:
            self._mark_dead(node_id)
        if rebuild and self._desk.holder is not None:
            self._desk.rebuilt.setdefault(client, {}).update((t.id, t) for t in handback.running)  # (exchange recalls it)
        else:
            self._adopt(client, handback.running, dispatch_hooks=rebuild)
        self._cond.notify_all()

    def _adopt(self, client: str, tasks: Sequence[TaskState], dispatch_hooks: bool) -> None:
        running = [t for t in tasks if not self._s.knows(t.id)]
        for t in running:
            t.origin = client
            if self._fwd is not None:  # the hybrid's selector counts them in its pool of every slot
                t.node = self._fwd.adopt(t.id, t.node)  # type: ignore[arg-type]  # (running: placed)
        self._s.adopt(running, dispatch_hooks=dispatch_hooks, now=self._now())

    def _decide(self, now: float) -> None:
        if self._desk.holder is not None or self._frozen:  # (the holder's running tasks are not counted here until
            return                                     # it hands them back; frozen: its State is being handed over)
        chosen = self._s.decide(now)
        pre = self._pre
        if pre is not None:  # (the runs placed start now; tasks left waiting may choose victims)
            pre.dispatched([t for t in chosen if t.node is not None], now)
            if pre.consider(now):
                self._cond.notify_all()  # (the clock thread: a grace to time)
        if not chosen:
            return
        for t in chosen:
            if t.node is None:  # dropped at its deadline: its client hears, and clears its record
                self._mail_to(t.origin, t.id, None, now)
                continue
            self.decisions += 1
            if self._fwd is not None:  # the hybrid: the node is the placement scheduler's to pick
                self._fwd.forward(t)
            else:
                self._mail_to(t.origin, t.id, t.node, now)
        self._cond.notify_all()

    # ---------------------------------------------------------- preemption (see runtime.selector_preempt)
    def _preemption(self) -> Optional[SelectorPreemption]:
        """This selector's preemption, made the first time it is asked for (and its clock thread started),
        if its policy has Preempt and it decides the nodes itself (centralized; a hybrid's selector
        does not know where its tasks run, and never preempts)."""
        if self._pre is None and self._fwd is None and self._s.interp.policy.preempt is not None and self._s.hooks:
            self._pre = SelectorPreemption(self._s)
            threading.Thread(target=self._preemption_clock, name="ra-selector-preempt", daemon=True).start()
        return self._pre

    def _preemption_clock(self) -> None:
        """Ask for the stops at the end of each grace, and make the pass of every whole second while tasks
        wait (a condition on the clock, ``task.waited >= 5``, takes effect within one)."""
        pre = self._pre
        assert pre is not None
        with self._cond:
            while not self._closed:
                now = self._now()
                due = pre.next_due()
                if self._frozen or due > now:  # (frozen: a switch takes the State; its successor chooses again)
                    self._cond.wait(0.1 if self._frozen else min(due - now, 1.0))
                    continue
                asked = pre.ask(now)
                self._decide(now)
                if asked:
                    self._cond.notify_all()  # (the long polls of the victims' processes carry the stops)

    def preempted(self, stops: Sequence[Stop]) -> None:
        """A process stopped these runs, asked to (see :meth:`SelectorPreemption.stopped`): each victim
        waits again, OnPreempt run once, and the task that chose it takes its place. A run a process
        stopped that this selector did not ask for (a restart, a live switch in between) waits again
        all the same: it must run again whoever asked."""
        with self._cond:
            now = self._now()
            pre = self._preemption()
            for tid, run in stops:
                got: Optional[Tuple[TaskState, Optional[TaskState]]] = None
                victim = self._s.running.get(tid)
                if pre is not None:
                    got = pre.stopped(tid, run, now)
                elif victim is None or victim.run != run:
                    continue
                elif self._fwd is None:  # (a policy without Preempt now: the task only waits again)
                    self._s.vacate(tid, now)
                    got = (victim, None)
                else:  # the hybrid's pool: a finish, and the task queued again (OnArrival again)
                    self._release([tid], now)
                    victim.node, victim.run, victim.deadline = None, run + 1, float("inf")
                    self._s.add(victim, now)
                    got = (victim, None)
                if got is None:
                    continue
                victim, placed = got
                self._waiting[victim.origin] = self._waiting.get(victim.origin, 0) + 1  # (its decision comes again)
                if placed is not None:
                    self.decisions += 1
                    self._mail_to(placed.origin, placed.id, placed.node, now)
            self._decide(now)
            self._cond.notify_all()

    # ---------------------------------------------------------- live switches
    def wake(self, client: str) -> None:
        """End ``client``'s long poll now (or its next one's: a call may land after this): its process
        freezes for a live switch, which waits for its call in flight to land."""
        with self._cond:
            self._woken.add(client)
            self._cond.notify_all()

    def install(self, state: Optional[dict]) -> str:
        """The State handed over by the plan this one replaces (None: the initial State; the processes
        rebuild theirs); exchanges are answered from now on. Returns this incarnation."""
        self._ensure_configured()
        with self._cond:
            if state is not None and not self._installed:
                self._s.interp.state.update(state)
            self._installed = True
            self._desk.hold_off()  # every process hands its tasks over first: none is alone until all called
            self._cond.notify_all()
            return self.incarnation

    def freeze(self) -> dict:
        """Stop deciding and yield the exact State (every process has stopped talking to this selector).

        A decision no process received (its mail, or a task forwarded to a placement scheduler and
        not placed) is undone as the hybrid undoes one dropped at its deadline: OnFinish runs and its
        room is freed, so the State holds the OnArrival of every task still pending and the
        OnDispatch of every task running. ``exact`` is False when this incarnation cannot know that
        State: it was restarted, or a lease is still out (its holder never handed it back).
        """
        with self._cond:
            self._frozen = True
            fwd = self._fwd
            if fwd is not None:
                fwd.freeze()
                self._cond.wait_for(lambda: not fwd.in_flight, timeout=10.0)
                undone = fwd.unplaced()
            else:
                undone = []
            undone += [tid for mail in self._mail.values() for tid, node in mail if node is not None]
            self._mail.clear()
            now = self._now()
            self._release(undone, now)
            exact = not self._restarted and self._desk.holder is None
            return {"state": copy_state(self._s.interp.state), "exact": exact, "incarnation": self.incarnation,
                    "undone": len(undone)}

    def ping(self) -> None:
        """Nothing: a client times the round trip (the monitor's message latency)."""

    def where(self) -> str:
        """The node this selector runs on."""
        return ray.get_runtime_context().get_node_id()

    def explain(self, task_id: str) -> Optional[dict]:
        """Why a task is pending here, or its decision record; for the hybrid, where its placement
        stands (see :mod:`ray_adaptive.plan.explain`)."""
        with self._cond:
            out = explain_pending(self._s, task_id, self._now())
            nominated = self._pre.explain(task_id) if out is not None and self._pre is not None else None
            if out is not None and nominated is not None:  # (it waits for a victim it chose: see selector_preempt)
                out = {**out, **nominated, "why": f"{out['why']}; {nominated['preempting']}"}
            if out is not None:
                return out
            if self._fwd is None:  # (placed: in a victim's place, or by a decision it recorded)
                placed = explain_placed(self._s.records or (), task_id)
                return self._pre.explain_placed(task_id, placed) if self._pre is not None else placed
            placements = self._fwd.placements()
        for answer in ray.get([p.explain.remote(task_id) for p in placements], timeout=30):
            if answer is not None:
                return answer
        return None

    def mark_dead(self, node_id: str) -> None:
        with self._cond:
            self._mark_dead(node_id)

    def _mark_dead(self, node_id: str) -> None:
        if node_id in self._dead:
            return
        self._dead.add(node_id)
        n = self._s.by_id.get(node_id)  # (the hybrid's selector has only the pool)
        if n is not None:
            n.alive = False
        if self._fwd is not None:
            self._fwd.mark_dead(node_id)

    def stats(self) -> dict:
        with self._cond:
            return {"decisions": self.decisions, "pending": self._s.pending, "leases": self._desk.granted,
                    "live_placements": len(self._fwd.live) if self._fwd is not None else 0, "holder": self._desk.holder,
                    "loads": {n: k for n, k in self._fwd.loads.items() if k} if self._fwd is not None else {},
                    "delivery_slack_s": self._delivery.stats(),
                    **({"forward": self._fwd.stats()} if self._fwd is not None else {}),
                    **(self._pre.stats() if self._pre is not None else {})}

    def decision_latencies(self) -> List[float]:
        with self._cond:
            return list(self._s.decision_s)

    def export(self) -> dict:
        """Queues and State (while a lease is out, the holder's process exports the live ones)."""
        with self._cond:
            return {**self._s.export(), "leased_to": self._desk.holder}

    def close(self) -> None:
        with self._cond:
            self._closed = True
            if self._fwd is not None:
                self._fwd.close()
            self._cond.notify_all()


def _lookup(name: str, namespace: str):
    """A placement actor by name; None if it died before this selector started (its node left): the
    :class:`Forwarder` works on with the others, as it does when one dies later."""
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        return None
