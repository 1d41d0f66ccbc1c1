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
from collections import deque
from typing import Any, Callable, Dict, Mapping, Optional

from ray_adaptive.plan import RoleSpec, Scheduler
from ray_adaptive.plan.replicas import copy_state, merge_into, same_state
from ray_adaptive.runtime.messages import SyncAnswer

__all__ = ["StateStore", "StoreClient", "ping"]


class StateStore:
    """The runtime's registry and the schedulers' meeting point.

    * ``config()``: everything a process needs to join the runtime (policy,
      plan, nodes, slot resources): how ``.remote()`` works from any worker.
    * ``sync(member, delta, outstanding)``: merge a replica's State changes,
      record its outstanding tasks per node (its heartbeat), and return the
      merged State, the *others'* outstanding tasks per node and the
      store's incarnation.

    Restarted when its process dies (``max_restarts=-1``), it starts from
    the initial State with a new incarnation; each member that sees the
    change pushes its whole contribution since it joined, so the merged
    State comes back (see :class:`StoreClient`).
    """

    def __init__(self, config: dict, state: dict, merge: Optional[Mapping[str, str]]):
        self._config = config
        self._state = copy_state(state)
        self._merge = dict(merge or {})
        self._outstanding: Dict[str, Dict[str, int]] = {}
        self._lock = threading.Lock()
        self.calls = 0
        self.incarnation = uuid.uuid4().hex

    def config(self) -> dict:
        return self._config

    def ping(self) -> None:
        """Nothing: a caller times the round trip (the monitor's message latency)."""

    def sync(self, member: str, delta: Mapping[str, Any], outstanding: Mapping[str, int]) -> tuple:
        with self._lock:
            self.calls += 1
            if delta:
                merge_into(self._state, delta, self._merge)
            self._outstanding[member] = dict(outstanding)
            return SyncAnswer({v: self._state[v] for v in self._merge}, self._loads(but=member), self.incarnation)

    def _loads(self, but: Optional[str] = None) -> Dict[str, int]:
        """Outstanding tasks per node, over every member but ``but``."""
        loads: Dict[str, int] = {}
        for m, per_node in self._outstanding.items():
            if m != but:
                for node, k in per_node.items():
                    loads[node] = loads.get(node, 0) + k
        return loads

    def leave(self, member: str) -> None:
        with self._lock:
            self._outstanding.pop(member, None)

    def stats(self) -> dict:
        """Sync calls, members, and the outstanding tasks per node the members last reported."""
        with self._lock:
            return {"calls": self.calls, "members": len(self._outstanding), "outstanding": self._loads()}


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
    hundred: each sync cost the store actor about 0.6 ms of CPU, 50-57 us
    per task of a lone driver's loop on 2 cores, taken from the workers. A
    process that starts submitting is news to the others at its first sync;
    until their next one (within ``QUIET_S``), it sees their State and loads
    as they last pushed them.

    A member keeps the sum of everything it pushed (``_total``, merged by
    the same rules). When the store's incarnation changes -- it died and
    was restarted from the initial State -- the member keeps its own view
    instead of the store's answer and pushes, at once, all it had pushed
    before the push that answer is for: the merged State is back once
    every member has synced.
    """

    QUIET_S = 0.1  # the longest period between syncs while they bring no news

    def __init__(self, member: str, spec: RoleSpec, sched: Scheduler, store, floor_s: float = 0.0):
        self.member, self.spec, self.sched, self.store = member, spec, sched, store
        self.floor_s = floor_s  # the shortest period between syncs, whatever the plan says
        self._next = 0.0
        self._inflight = None  # Future of the store's answer to the last push
        self._sent: dict = {}  # the State changes of this replica the last push carried
        self._seen: Optional[tuple] = None  # (merged State, others' loads) of the last answer
        self._total: dict = {}  # every State change this replica pushed, merged
        self._before: dict = {}  # _total before the last push
        self._incarnation: Optional[str] = None  # the store's, at the last answer
        self._repush: Optional[dict] = None  # the store restarted: what it lacks of ours, for the next push
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
        """A restarted store lacks this replica's pushes: the next refresh pushes, wanted or not."""
        return self._repush is not None

    def refresh(self, want: bool = True, wait: bool = False) -> None:
        """Apply the store's answer if it has come; start the next sync if ``want`` and one is due;
        with ``wait``, wait for that answer too (a placement actor, off the launch path, decides on
        fresh loads)."""
        if self._inflight is not None:
            if not self._inflight.done():
                return
            self._apply()
        if (want or self.owes) and self.due():
            log = self.sched.log
            delta = log.take() if log is not None else {}
            self._before = copy_state(self._total)
            merge_into(self._total, delta, self.spec.merge)
            if self._repush is not None:  # a restarted store has none of what came before its answer
                merge_into(self._repush, delta, self.spec.merge)
                delta, self._repush = self._repush, None
            self._sent = delta
            sent = time.perf_counter()
            self._inflight = self.store.sync.remote(self.member, delta, self.sched.outstanding()).future()
            # timed when the answer lands (on Ray's thread), not when a later refresh applies it
            self._inflight.add_done_callback(lambda _f: self.sync_s.append(time.perf_counter() - sent))
            self._next = time.monotonic() + self._period
            self.pushes += 1
            if wait:
                self._apply()

    def _apply(self) -> None:
        answer, self._inflight = self._inflight, None
        try:
            reply: SyncAnswer = answer.result()
        except Exception:  # the store died (it restarts: a later answer says so) or is shut down
            return
        state, others, incarnation = reply.state, reply.others, reply.incarnation
        restarted = self._incarnation not in (None, incarnation)
        self._incarnation = incarnation
        if restarted:  # it merged our last push only: keep our view, push all before it at once
            self._repush, self._next, self._seen = copy_state(self._before), 0.0, None
            self.sched.set_others(others)
            return
        if self._seen is None or others != self._seen[1]:
            news = True
        else:  # the others pushed no State change: the store merged this replica's push only
            expected = copy_state(self._seen[0])
            merge_into(expected, self._sent, self.spec.merge)
            news = not same_state(state, expected)
        if news:
            self._period = self._base
        elif self._base > 0:  # (a member syncing before every batch keeps doing so: the plan's choice)
            self._period = min(2 * self._period, max(self.QUIET_S, self._base))
        self._seen = (state, others)
        log = self.sched.log
        if log is not None:
            merged = copy_state(state)
            merge_into(merged, log.peek(), self.spec.merge)  # this replica's changes since the push
            self.sched.interp.state.update(merged)
            log.rebase(state)  # (those changes are still to push)
        self.sched.set_others(others)

    def report(self) -> None:
        """After dispatching or finishing: tell the store this scheduler's loads at once (fire and
        forget). Without it a scheduler with nothing pending never syncs, and the others would
        wait forever for room its finished tasks freed."""
        if self.store is not None:
            self.store.sync.remote(self.member, {}, self.sched.outstanding())


def ping(actor, record: Callable[[float], None]) -> None:
    """Call ``actor.ping`` and, when it answers, ``record`` the round trip (seconds). Never waits:
    an actor slow to answer delays nothing but its own figure."""
    start = time.perf_counter()

    def answered(future) -> None:
        if future.exception() is None:
            record(time.perf_counter() - start)

    actor.ping.remote().future().add_done_callback(answered)
