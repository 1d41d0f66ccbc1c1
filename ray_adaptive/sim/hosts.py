"""A plan's roles on the simulated cluster, each hosted by what its role spec says, as the runtime hosts them.

:func:`~ray_adaptive.plan.roles.role_specs` says which roles a plan has and
what each runs (:class:`~ray_adaptive.plan.roles.RoleSpec`); a host makes a
role's servers (:mod:`ray_adaptive.sim.servers`) and drives them, reading
the spec alone:

* :class:`SelectorHost` -- the one selector;
* :class:`SchedulersHost` -- k schedulers, each made when first used.

A server's steps, the same for every role: it serves its inbox (finish
notifications, syncs) first-come first-served, then decides -- a node for a
task (:meth:`RoleHost.attempt`: the plan's own decision step on what its
view shows, the task sent when the attempt's busy time ends, refused by a
node that filled up meanwhile), or, for a role that ``forwards``, a task
alone, sent on to the schedulers role in turn (:meth:`SelectorHost.select`,
while the slots its forwarded tasks hold leave room in the pool). Finding
no room, it waits: for a freed slot (``wakes_on_room``), for its next
heartbeat (a cached ``view``), or for a task it forwarded to finish.
Hooks run on its State as its spec says (see :mod:`ray_adaptive.plan.roles`).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ray_adaptive.plan import LoadKind, Role, RoleCosts, RoleSpec, Scheduler
from ray_adaptive.plan.queue import PendingQueue
from ray_adaptive.plan.replicas import copy_state
from ray_adaptive.plan.room import has_room
from ray_adaptive.sim.bookkeeping import Books
from ray_adaptive.sim.events import ARRIVAL, DECIDE
from ray_adaptive.sim.heartbeats import CachedView, Heartbeats, ViewNode
from ray_adaptive.sim.model import Node, Task
from ray_adaptive.sim.servers import Server, Servers, assign_homes
from ray_adaptive.sim.sync_rounds import SYNC, SyncRounds

__all__ = ["RoleHost", "SelectorHost", "SchedulersHost", "FINISH"]

FINISH = "finish"  # an inbox item: a task's finish notification (the other kind: sync_rounds.SYNC)


class RoleHost:
    """One role of the plan in force: its servers and their steps (see the module doc)."""

    homed = False  # tasks enter at k servers: it counts those holding tasks (the decisions made at once)

    def __init__(self, books: Books, spec: RoleSpec, role: Role, costs: RoleCosts, seed: int,
                 state: Optional[dict] = None):
        """``state``: the State every server starts from (a live switch's handover; None: the initial one)."""
        self.books, self.loop, self.spec, self.role, self.costs = books, books.loop, spec, role, costs
        self._seed, self._state = seed, state
        n = len(books.members)
        self._key = books.key_of(spec.program)
        # (a FIFO queue has no groups to remember scores by; the pool fits every task: no resource fit)
        self._scoring = books.scoring(spec.program, spec.split, books.any_resources and not spec.pool,
                                      None if spec.fifo else self._key)
        self._attempt_s = costs.compute_s + costs.probe_s * (0 if spec.pool else spec.view.probes(n))
        self._heartbeats = Heartbeats(spec.view.period_s, seed) if spec.view.kind is LoadKind.CACHED else None
        self.decide = self.attempt  # what a server with tasks and room does: pick a node for a task

    def _server(self, name: str, i: int, order: int, beat: int) -> Server:
        """Server ``name``: random numbers of its own (the run's seed and ``i``), ``order`` among the
        plan's servers, heartbeat rounds as view ``beat``'s (see Heartbeats.tick)."""
        books = self.books
        core = Scheduler(self.spec.program, (), hooks=False, num_nodes=len(books.members),
                         queue=PendingQueue(self._key, fifo=self.spec.fifo), scoring=self._scoring)
        if self._state is not None:  # (the State handed over, for the variables this program declares)
            own = core.interp.state
            own.update(copy_state({v: x for v, x in self._state.items() if v in own}))
        s = Server(name, self.role, self.costs, core, np.random.default_rng([self._seed, i]), order,
                   sample_d=self.spec.sample_d)
        s.attempt_s = self._attempt_s
        if self._heartbeats is not None:
            s.view = CachedView(list(books.nodes), self._heartbeats, beat, books.history)
        return s

    def servers(self) -> list[Server]:
        """The servers made so far, in order."""
        raise NotImplementedError

    def entry_for(self, task: Task) -> Server:
        """The server ``task`` enters at (a role with ``spec.entry``)."""
        raise NotImplementedError

    def told_of(self, task: Task, i: int) -> Optional[Server]:
        """The server told of the finish of ``task``, the ``i``-th running task this role did not decide
        (prefilled, or running when the plan was switched to); None: the role handles no finishes."""
        raise NotImplementedError

    def skipped_busy(self, s: Server, until: float) -> float:
        """Busy time ``s`` owes for work not simulated one event at a time (see sync_rounds)."""
        return 0.0

    # -------------------------------------------------------------- messages
    def deliver(self, s: Server, task: Task, arrived: bool = True) -> None:
        """A task reaches a scheduler's pending queue (its receive cost is charged when it is decided);
        ``arrived`` False: handed over by a switch (its OnArrival is in the State handed over)."""
        books = self.books
        if not s.ticking:
            self.rouse(s)
        s.received += 1
        s.pending.add(task)
        if self.homed:
            books.holders.add(s)
        books.where[task] = s
        if arrived and books.on_arrival and self.spec.entry:
            self.run_hook(s, "OnArrival", task, None)
        self.kick(s)

    def finished(self, task: Task) -> None:
        """``task``, which this role decided, left its node (or was dropped forwarded): tell its server."""
        raise NotImplementedError

    def notify(self, s: Server, task: Task) -> None:
        """A finish notification reaches a scheduler's inbox."""
        if not s.ticking:
            self.rouse(s)
        s.inbox.append((FINISH, task))
        self.kick(s)

    def rouse(self, s: Server) -> None:
        """``s`` is reached while dormant (see sync_rounds)."""

    def adopt(self, s: Server, task: Task, node: Node) -> None:
        """``s`` takes ``task``, running on ``node``, as a task it decided (a prefilled one)."""
        self.run_hook(s, "OnDispatch", task, node)

    def run_hook(self, s: Server, name: str, task: Task, node) -> None:
        """Hook ``name`` on ``s``'s State, if the role keeps State; a forwarding role decides the task,
        not the node: its hooks see none."""
        spec = self.spec
        if not spec.hooks:
            return
        if spec.forwards:
            node = None
        if spec.merge is not None:  # a replica: what it changes is pushed at its next sync
            self.books.hooks.run_replica(s.interp, s.unpushed, name, task, node, self.loop.now)
        else:
            self.books.hooks.run(s.interp, name, task, node, self.loop.now)

    # ------------------------------------------------------------- the steps
    def kick(self, s: Server) -> None:
        if not s.busy:
            self.step(s)

    def busy(self, s: Server, cost: float, fn, *args) -> None:
        cost = s.work_time(cost, self.loop.now)
        s.busy = True
        s.busy_s += cost
        self.loop.after(cost, DECIDE, fn, s, *args)

    def step(self, s: Server) -> None:
        if self.books.frozen or s.retired:  # a switch's pause; a retired server's last work ended
            return
        if s.inbox:
            kind, payload = s.inbox.popleft()
            cost = s.costs.finish_s if kind == FINISH else s.costs.sync_s
            self.busy(s, cost, self.item_done, kind, payload)
            return
        if not s.pending or s.blocked:
            return
        self.decide(s)

    def item_done(self, s: Server, kind: str, payload) -> None:
        s.busy = False
        if s.retired:  # (the State it updated was handed over without it: the truth's has it)
            return
        if kind == FINISH:
            self.on_finish(s, payload)
        elif kind == SYNC:
            s.sync_queued = False
            self.books.hooks.push_pull(s.interp, s.unpushed, self.loop.now)
        self.step(s)

    def on_finish(self, s: Server, task: Task) -> None:
        if task.node is not None:
            self.run_hook(s, "OnFinish", task, task.node)

    # ------------------------------------------------- a node for a task
    def attempt(self, s: Server) -> None:
        books, now = self.books, self.loop.now
        s.attempts += 1
        cost = s.attempt_s
        pick = s.core.pick(s.candidates(books.members, books.cluster.with_room, now), now)
        if self.homed and not s.pending:
            books.holders.discard(s)
        if pick is None:
            s.failed += 1
            self.block(s)
            if books.preemption is not None:  # waiting tasks may choose victims (sim.plan_preemption)
                books.preemption.consider(self, s)
            if s.view is not None:  # learn of room at the next heartbeat
                nxt = s.view.next_round(now)
                if s.wake_at < nxt:
                    s.wake_at = nxt
                    self.loop.at(nxt, ARRIVAL, self.wake, s)
            self.busy(s, cost, self.attempt_failed)
            return
        task, view = pick
        books.where.pop(task, None)
        books.claimed.add(task)
        node = view.node if isinstance(view, ViewNode) else view
        self.busy(s, cost + books.recv_cost(s, task) + s.costs.send_s, self.dispatch_done, task, node, now)

    def attempt_failed(self, s: Server) -> None:
        s.busy = False
        self.step(s)  # (a no-op for a retired one)

    def sent(self, s: Server, task: Task) -> bool:
        """``s``'s decision on ``task`` is sent (its busy time ended): False if it is void -- not in effect
        when the plan was switched, so undone (the task was handed over)."""
        s.busy = False
        if s.retired:
            return False
        self.books.claimed.discard(task)
        return True

    def dispatch_done(self, s: Server, task: Task, node: Node, decided_at: float) -> None:
        if not self.sent(s, task):
            return
        books = self.books
        if task.status == "pending":
            if node.has_room and node.fits(task):
                self.dispatch(s, task, node, decided_at)
            else:  # the node filled up meanwhile: a bounce
                s.bounces += 1
                if books.deadline == "dispatch" and task not in books.forwarded and self.loop.now >= task.spec.deadline:
                    books.timeout(task)  # refused after its deadline: dropped
                else:
                    s.pending.add(task)
                    if self.homed:
                        books.holders.add(s)
                    books.where[task] = s
        self.step(s)

    def dispatch(self, s: Server, task: Task, node: Node, decided_at: float) -> None:
        sample = self.books.place(s, task, node, decided_at, self.deciders(s))
        if self.spec.hooks:
            self.run_hook(s, "OnDispatch", task, node)
        if s.view is not None:
            s.view.dispatched(node, self.loop.now)
        if sample is not None:
            self.books.record(sample)

    def deciders(self, s: Server) -> int:
        """How many decisions the plan is making at once, as ``s`` makes one (see RatioSampler.sample)."""
        return 1

    def block(self, s: Server) -> None:
        """``s`` found no room: it waits (until a slot frees, if it wakes on room)."""
        s.blocked = True
        if self.spec.wakes_on_room:
            self.books.wait_for_room(s, self.wake)

    def wake(self, s: Server) -> None:
        if s.retired:
            return
        s.blocked = False
        self.books.stop_waiting(s)
        self.kick(s)


class SelectorHost(RoleHost):
    """The one selector: every task enters it; it decides the node itself, or forwards the task it picks
    to the schedulers role (``spec.forwards``), counting the slots its forwarded tasks hold."""

    def __init__(self, books: Books, spec: RoleSpec, costs: RoleCosts, seed: int, state: Optional[dict] = None):
        super().__init__(books, spec, Role.SELECTOR, costs, seed, state)
        self.server = self._server("selector", 1, 0, 0)
        self.outstanding = 0  # forwarded tasks not finished nor dropped: the slots they hold, as it counts them
        self.placements: Optional[SchedulersHost] = None  # where a forwarding selector's picks go
        if spec.forwards:
            self.decide = self.select  # a task alone, for the schedulers role to place

    def servers(self) -> list[Server]:
        return [self.server]

    def entry_for(self, task: Task) -> Server:
        return self.server

    def told_of(self, task: Task, i: int) -> Optional[Server]:
        return self.server if self.spec.finishes else None

    def finished(self, task: Task) -> None:
        self.notify(self.server, task)

    def adopt(self, s: Server, task: Task, node: Node) -> None:
        super().adopt(s, task, node)
        if self.spec.forwards:
            self.outstanding += 1

    # --------------------------------------------- a task for the schedulers
    def select(self, s: Server) -> None:
        books = self.books
        if not has_room(self.outstanding, books.total_slots):  # the pool of every slot is full
            self.block(s)
            return
        s.attempts += 1
        pick = s.core.pick(books.members[:1], self.loop.now)  # (any node stands for the pool: the task part reads none)
        if pick is None:
            s.failed += 1
            self.block(s)
            return
        task = pick[0]
        books.where.pop(task, None)
        books.claimed.add(task)
        self.busy(s, s.attempt_s + books.recv_cost(s, task) + s.costs.send_s, self.forward_done, task, self.loop.now)

    def forward_done(self, s: Server, task: Task, decided_at: float) -> None:
        if not self.sent(s, task):
            return
        books = self.books
        if task.status == "pending":
            s.decisions += 1
            self.outstanding += 1
            books.forwarded[task] = decided_at
            self.run_hook(s, "OnDispatch", task, None)
            placements = self.placements
            target = placements[books.forwards % len(placements)]
            books.forwards += 1
            placements.deliver(target, task)
        self.step(s)

    def on_finish(self, s: Server, task: Task) -> None:
        if not self.spec.forwards:
            super().on_finish(s, task)
            return
        self.books.forwarded.pop(task, None)
        self.outstanding -= 1
        s.blocked = False
        self.run_hook(s, "OnFinish", task, None)


class SchedulersHost(RoleHost):
    """k schedulers, each made when first used: tasks enter each at its submitter's own
    (``spec.entry``: :func:`~ray_adaptive.sim.servers.assign_homes`), or the selector forwards them in
    turn. Replicated State (``spec.merge``) is one store (``sync_s`` 0: every read and write goes to it)
    or synced every ``sync_s`` (:class:`~ray_adaptive.sim.sync_rounds.SyncRounds`)."""

    def __init__(self, books: Books, spec: RoleSpec, costs: RoleCosts, k: int, seed: int, first: int,
                 state: Optional[dict] = None):
        """``first``: the random numbers of scheduler i are the run's seed and ``first + i``."""
        super().__init__(books, spec, Role.SCHEDULERS, costs, seed, state)
        self.homed = spec.entry
        self.homes = assign_homes(books.tasks, k) if spec.entry else {}
        self._first = first
        self._store: list = []  # one store (instant sync): every replica's State is the first one's
        self._k = Servers(k, self._make)
        self.rounds: Optional[SyncRounds] = None  # periodic sync (a replica with changes to merge)
        if spec.merge is not None and spec.sync_s > 0:
            self.rounds = SyncRounds(self, spec.sync_s)
            self._k.on_made = self.rounds.first

    def _make(self, i: int) -> Server:
        s = self._server(f"s{i}", self._first + i, 1 + i, i)
        if self.spec.merge is not None and not self.spec.sync_s:
            if not self._store:
                self._store.append(s.interp.state)
            s.interp.state = self._store[0]
        return s

    def __len__(self) -> int:
        return len(self._k)

    def __getitem__(self, i: int) -> Server:
        return self._k[i]

    def __iter__(self):
        return iter(self._k)

    def servers(self) -> list[Server]:
        return self._k.made()

    def entry_for(self, task: Task) -> Server:
        return self._k[self.homes[task]]

    def told_of(self, task: Task, i: int) -> Optional[Server]:
        if not self.spec.finishes:
            return None
        k = len(self._k)
        return self._k[self.homes.get(task, i % k) if self.homed else i % k]  # (a prefilled copy has no home)

    def finished(self, task: Task) -> None:
        self.notify(self.books.owner[task], task)

    def rouse(self, s: Server) -> None:
        if self.rounds is not None:
            self.rounds.rouse(s)

    def skipped_busy(self, s: Server, until: float) -> float:
        return self.rounds.skipped_busy(s, until) if self.rounds is not None else 0.0

    def deciders(self, s: Server) -> int:
        """Where tasks enter at k schedulers, each holding tasks decides on its own; else one at a time."""
        if not self.homed:
            return 1
        holders = self.books.holders
        return len(holders) + (0 if s in holders else 1)
