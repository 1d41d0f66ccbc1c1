"""The actors a plan may need: state store, selector, placement schedulers.

Each wraps a :class:`~ray_adaptive.runtime.scheduler.Scheduler` (or, for the
store, merged State and loads) and speaks in batches: one call carries every
task and finish notification that accumulated since the last call, so a
submitting loop never costs one round trip per task.

None of them owns a result: the submitting process launches every task
itself (its ObjectRef stays with the caller), so an actor's death loses
decisions in flight, never results.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ray_adaptive.runtime.roles import RoleSpec
from ray_adaptive.runtime.scheduler import POOL, NodeState, Scheduler, TaskState
from ray_adaptive.sim.replicas import copy_state, merge_into

__all__ = ["StateStore", "Selector", "Placement", "make_scheduler"]

Decision = Tuple[str, str]  # (task id, node id)


def make_scheduler(spec: RoleSpec, nodes: Sequence[Mapping], seed: int = 0) -> Scheduler:
    """A role's scheduler over the cluster's nodes (dicts of :meth:`NodeState.as_dict`)."""
    views = [NodeState.from_dict(n) for n in nodes]
    if spec.pool:
        views = [NodeState(POOL, 0, sum(n.executors for n in views), sum(n.queue for n in views), {})]
    return Scheduler(spec.program, views, hooks=spec.hooks, fifo=spec.fifo, sample_d=spec.sample_d,
                     merge=spec.merge, seed=seed, num_nodes=len(nodes))


class StateStore:
    """The runtime's registry and the schedulers' meeting point.

    * ``config()``: everything a process needs to join the runtime (policy,
      plan, nodes, slot resources): how ``.remote()`` works from any worker.
    * ``sync(member, delta, outstanding)``: merge a replica's State changes,
      record its outstanding tasks per node (its heartbeat), and return the
      merged State and the *others'* outstanding tasks per node.
    """

    def __init__(self, config: dict, state: dict, merge: Optional[Mapping[str, str]]):
        self._config = config
        self._state = copy_state(state)
        self._merge = dict(merge or {})
        self._outstanding: Dict[str, Dict[str, int]] = {}
        self._lock = threading.Lock()
        self.calls = 0

    def config(self) -> dict:
        return self._config

    def sync(self, member: str, delta: Mapping[str, Any], outstanding: Mapping[str, int]) -> tuple:
        with self._lock:
            self.calls += 1
            if delta:
                merge_into(self._state, delta, self._merge)
            self._outstanding[member] = dict(outstanding)
            others: Dict[str, int] = {}
            for m, per_node in self._outstanding.items():
                if m != member:
                    for node, k in per_node.items():
                        others[node] = others.get(node, 0) + k
            return {v: self._state[v] for v in self._merge}, others

    def leave(self, member: str) -> None:
        with self._lock:
            self._outstanding.pop(member, None)

    def stats(self) -> dict:
        with self._lock:
            return {"calls": self.calls, "members": len(self._outstanding)}


class _Member:
    """A scheduler that syncs with the store: State deltas and heartbeats of loads."""

    def __init__(self, member: str, spec: RoleSpec, sched: Scheduler, store, floor_s: float = 0.0):
        self.member, self.spec, self.sched, self.store = member, spec, sched, store
        self.floor_s = floor_s  # the shortest period between syncs, whatever the plan says
        self._next = 0.0

    def due(self) -> bool:
        return self.store is not None and time.monotonic() >= self._next

    def sync(self) -> None:
        """Push this scheduler's changes and loads; pull the merged State and the others' loads."""
        import ray

        log = self.sched.log
        delta = log.take() if log is not None else {}
        state, others = ray.get(self.store.sync.remote(self.member, delta, self.sched.outstanding()))
        if log is not None:
            self.sched.interp.state.update(copy_state(state))
        self.sched.set_others(others)
        period = min(p for p in (self.spec.sync_s, self.spec.heartbeat_s, 1.0) if p > 0) if self.spec.merge or self.spec.heartbeat_s else 0.0
        self._next = time.monotonic() + max(period, self.floor_s)

    def report(self) -> None:
        """After dispatching or finishing: tell the store this scheduler's loads at once (fire and
        forget). Without it a scheduler with nothing pending never syncs, and the others would
        wait forever for room its finished tasks freed."""
        if self.store is not None:
            self.store.sync.remote(self.member, {}, self.sched.outstanding())


class Placement:
    """A hybrid's placement scheduler, pinned to a node: places forwarded tasks by the node part of Score."""

    def __init__(self, index: int, spec: RoleSpec, nodes: Sequence[Mapping], store, t0: float):
        import ray

        self.node_id = ray.get_runtime_context().get_node_id()
        self._t0 = t0
        self._m = _Member(f"placement-{index}", spec, make_scheduler(spec, nodes, seed=index), store)

    def where(self) -> str:
        return self.node_id

    def place(self, forwarded: Sequence[TaskState], finished: Sequence[str]) -> List[Decision]:
        """Finish notifications, then new tasks, then decisions (also for tasks held from earlier calls)."""
        s, now = self._m.sched, time.time() - self._t0
        for tid in finished:
            s.finish(tid, now)
        for t in forwarded:
            s.add(t, now)
        if s.pending and self._m.due():
            self._m.sync()
        decided = s.decide(now)
        if decided or finished:
            self._m.report()
        return [(t.id, t.node) for t in decided]

    def mark_dead(self, node_id: str) -> None:
        n = self._m.sched.by_id.get(node_id)
        if n is not None:
            n.alive = False

    def export(self) -> dict:
        return self._m.sched.export()


class Selector:
    """The selector: the global pending queue, exact State, decisions for every submitting process.

    ``exchange(client, tasks)`` adds a client's new tasks and returns the
    decisions made for that client's tasks (waiting up to ``wait_s`` for one while it has tasks pending here:
    a long poll, so an idle client costs nothing and a busy one gets its
    decisions as soon as they are made). With placement schedulers (the
    hybrid), a decision picks the task; a forwarding thread sends batches to
    the placement schedulers, round-robin, and relays their node choices.
    ``finished(ids)`` takes finish notifications, as a separate call so that
    the room they free reaches a long poll in flight.
    """

    def __init__(self, spec: RoleSpec, nodes: Sequence[Mapping], placements: Sequence[Any], t0: float,
                 wait_s: float = 0.05):
        self._s = make_scheduler(spec, nodes)
        self._t0 = t0
        self._wait_s = wait_s
        self._placements = list(placements)
        self._cond = threading.Condition()
        self._mail: Dict[str, List[Decision]] = {}
        self._waiting: Dict[str, int] = {}  # client -> its tasks not decided yet
        self._origin: Dict[str, str] = {}  # forwarded task -> client
        self._hop: Dict[str, int] = {}  # forwarded task -> placement index
        self._out: List[List[TaskState]] = [[] for _ in self._placements]
        self._fin: List[List[str]] = [[] for _ in self._placements]
        self._rr = itertools.count()
        self.decisions = 0
        self._closed = False
        if self._placements:
            threading.Thread(target=self._forward_loop, name="ra-selector-forward", daemon=True).start()

    def _now(self) -> float:
        return time.time() - self._t0

    def finished(self, ids: Sequence[str]) -> None:
        """Finish notifications: free the room, run OnFinish, decide what that allows."""
        with self._cond:
            now = self._now()
            for tid in ids:
                if self._s.finish(tid, now) is not None and self._placements:
                    self._fin[self._hop.pop(tid)].append(tid)
            self._decide(now)
            self._cond.notify_all()

    def exchange(self, client: str, tasks: Sequence[TaskState]) -> List[Decision]:
        with self._cond:
            now = self._now()
            for t in tasks:
                t.origin = client
                self._s.add(t, now)
            self._waiting[client] = self._waiting.get(client, 0) + len(tasks)
            self._decide(now)
            deadline = time.monotonic() + self._wait_s
            while not self._mail.get(client) and self._waiting.get(client) and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            out = self._mail.pop(client, [])
            self._waiting[client] -= len(out)
            return out

    def _decide(self, now: float) -> None:
        chosen = self._s.decide(now)
        if not chosen:
            return
        self.decisions += len(chosen)
        for t in chosen:
            if self._placements:  # the hybrid: the node is the placement scheduler's to pick
                i = next(self._rr) % len(self._placements)
                self._hop[t.id] = i
                self._origin[t.id] = t.origin
                self._out[i].append(TaskState(t.id, t.arrival, t.fields, t.origin))
            else:
                self._mail.setdefault(t.origin, []).append((t.id, t.node))
        self._cond.notify_all()

    def _forward_loop(self) -> None:
        import ray

        held = [0] * len(self._placements)  # tasks a placement scheduler holds (no room in its view)
        while not self._closed:
            with self._cond:
                if not any(self._out) and not any(self._fin) and not any(held):
                    self._cond.wait(0.005)
                batches = [(i, self._out[i], self._fin[i]) for i in range(len(self._placements))
                           if self._out[i] or self._fin[i] or held[i]]
                for i, _, _ in batches:
                    held[i] += len(self._out[i])
                    self._out[i], self._fin[i] = [], []
            if not batches:
                continue
            refs = [self._placements[i].place.remote(out, fin) for i, out, fin in batches]
            try:
                answers = ray.get(refs)
            except Exception:  # a placement actor died: its tasks stay undecided (the client resubmits on timeout)
                time.sleep(0.01)
                continue
            with self._cond:
                for (i, _, _), decided in zip(batches, answers):
                    held[i] -= len(decided)
                    for tid, node in decided:
                        self._mail.setdefault(self._origin.pop(tid), []).append((tid, node))
                self._cond.notify_all()
            if not any(self._out) and any(held):
                time.sleep(0.001)  # held tasks wait for finishes or a heartbeat: do not spin

    def mark_dead(self, node_id: str) -> None:
        with self._cond:
            n = self._s.by_id.get(node_id)
            if n is not None:
                n.alive = False
        for p in self._placements:
            p.mark_dead.remote(node_id)

    def stats(self) -> dict:
        with self._cond:
            return {"decisions": self.decisions, "pending": self._s.pending}

    def decision_latencies(self) -> List[float]:
        with self._cond:
            return list(self._s.decision_s)

    def export(self) -> dict:
        with self._cond:
            return self._s.export()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
